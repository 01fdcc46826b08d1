//! BERT encoders (all-MiniLM, bge, e5): learned absolute position and token-type embeddings,
//! LayerNorm after each residual block (and after the embeddings), biased projections, exact
//! GELU, and non-causal attention, each sequence attending to all of itself. The graph ends at
//! every token's hidden state; pooling and normalisation follow (`crate::embed`).
//! llama.cpp: `src/models/bert.cpp`.

use crate::error::{Error, Result};
use crate::model::graph::{Attn, Builder, Graph, NodeId, Op};
use crate::model::hparams::{check_shape, read_common, HParams, Keys, Pooling, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_common(keys, tensors, RopeMode::Neox)?;
    hp.norm_eps = keys.f32_or("attention.layer_norm_epsilon", 1e-12)?;
    if keys.u64_opt("attention.causal")? == Some(1) {
        return Err(Error::metadata(
            format!("{}.attention.causal", keys.arch),
            "is true; a BERT encoder attends both ways",
        ));
    }
    let pos = tensors
        .get("position_embd.weight")
        .ok_or_else(|| Error::MissingTensor("position_embd.weight".into()))?;
    let n_pos = pos.shape.get(1).copied().unwrap_or(0) as usize;
    check_shape(pos, &[hp.n_embd, n_pos])?;
    // A position past the table has no embedding: the context ends there.
    hp.n_ctx_train = hp.n_ctx_train.min(n_pos);
    if let Some(t) = tensors.get("token_types.weight") {
        if t.shape.len() != 2 || t.row_len() != hp.n_embd {
            return Err(Error::tensor(
                "token_types.weight",
                format!("shape {:?} is not [{}, n_types]", t.shape, hp.n_embd),
            ));
        }
    }
    // llama.cpp's BERT default where the file names none.
    hp.pooling = hp.pooling.or(Some(Pooling::Mean));
    Ok(hp)
}

pub fn build(mut b: Builder) -> Graph {
    let hp = b.hp;
    let n = hp.n_embd;
    let x = b.push(
        "inp_embd",
        Op::GetRows {
            weight: "token_embd.weight".into(),
        },
        n,
    );
    let x = b.push(
        "inp_pos",
        Op::AddPosRows {
            x,
            weight: "position_embd.weight".into(),
        },
        n,
    );
    // Every token is of type 0: the first row of the token-type table.
    let x = b.push(
        "inp_type",
        Op::AddBias {
            x,
            bias: "token_types.weight".into(),
        },
        n,
    );
    let mut x = layer_norm(&mut b, x, "token_embd_norm", "inp_norm");
    for il in 0..hp.n_layer {
        let p = format!("blk.{il}");
        let q = linear(&mut b, x, &format!("{p}.attn_q"), hp.n_embd_q());
        let k = linear(&mut b, x, &format!("{p}.attn_k"), hp.n_embd_k());
        let v = linear(&mut b, x, &format!("{p}.attn_v"), hp.n_embd_v());
        let attn = Attn {
            causal: false,
            flash: true,
            head_dim_v: hp.head_dim_v,
            scale: hp.attn_scale,
            ..Attn::new(il, hp.n_head, hp.n_head_kv, hp.head_dim)
        };
        let a = b.push(
            format!("{p}.attn"),
            Op::Attention { q, k, v, attn },
            hp.n_head * hp.head_dim_v,
        );
        let o = linear(&mut b, a, &format!("{p}.attn_output"), n);
        let h = b.add(x, o, &format!("{p}.attn_res"));
        x = layer_norm(
            &mut b,
            h,
            &format!("{p}.attn_output_norm"),
            &format!("{p}.attn_out_norm"),
        );
        x = b.with_ffn(x, |b, x| {
            let up = linear(b, x, &format!("{p}.ffn_up"), hp.n_ff);
            let g = b.push(format!("{p}.ffn_gelu"), Op::Gelu { x: up }, hp.n_ff);
            let down = linear(b, g, &format!("{p}.ffn_down"), n);
            let h = b.add(x, down, &format!("{p}.ffn_res"));
            layer_norm(b, h, &format!("{p}.layer_output_norm"), &format!("{p}.layer_out_norm"))
        });
    }
    let x = b.push("out_rows", Op::Output { x }, n);
    b.finish(x)
}

/// `{name}.weight` · x + `{name}.bias`.
fn linear(b: &mut Builder, x: NodeId, name: &str, out: usize) -> NodeId {
    let y = b.matmul(x, &format!("{name}.weight"), out, name);
    b.push(
        format!("{name}_b"),
        Op::AddBias {
            x: y,
            bias: format!("{name}.bias"),
        },
        out,
    )
}

fn layer_norm(b: &mut Builder, x: NodeId, weight: &str, name: &str) -> NodeId {
    let w = b.width(x);
    let eps = b.hp.norm_eps;
    b.push(
        name,
        Op::LayerNorm {
            x,
            weight: format!("{weight}.weight"),
            bias: format!("{weight}.bias"),
            eps,
        },
        w,
    )
}
