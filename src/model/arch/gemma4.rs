//! Gemma 4 (text): sliding and full attention layers of different head widths and KV head
//! counts, full layers with K = V (no `attn_v`) and proportional RoPE (`rope_freqs.weight`),
//! the last layers reading an earlier layer's K/V cache, V RMS-normed without weight,
//! attention scale 1, per-layer input embeddings (PLE), a scalar per layer output, final
//! soft-capping. llama.cpp: `src/models/gemma4.cpp`. The norms multiply by w (no 1 + w).

use crate::error::{Error, Result};
use crate::model::graph::{Attn, Builder, Graph, NodeId, Op};
use crate::model::hparams::{check_shape, read_layered, HParams, Keys, LayerShape, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_layered(keys, tensors, RopeMode::Neox)?;
    let key = |k: &str| format!("{}.{k}", keys.arch);
    let n_layer = hp.n_layer;
    let weight = |name: &str| tensors.get(name).ok_or_else(|| Error::MissingTensor(name.to_string()));

    // `attention.sliding_window_pattern`: one bool per layer, true = sliding.
    let pattern = keys
        .md
        .get_array(&key("attention.sliding_window_pattern"))?
        .ok_or_else(|| Error::metadata(key("attention.sliding_window_pattern"), "missing"))?;
    let swa: Vec<bool> = pattern.iter().filter_map(|v| v.as_bool()).collect();
    if swa.len() != n_layer || pattern.len() != n_layer {
        return Err(Error::metadata(
            key("attention.sliding_window_pattern"),
            format!("{} flags for {n_layer} layers", pattern.len()),
        ));
    }
    let window = keys.usize_or("attention.sliding_window", 0)?;
    if window == 0 {
        return Err(Error::metadata(key("attention.sliding_window"), "must be ≥ 1"));
    }
    hp.sliding_window = Some(window);
    hp.swa_layers = swa.clone();

    let n_kv = keys.usize_layers("attention.head_count_kv", n_layer)?;
    let n_ff = keys.usize_layers("feed_forward_length", n_layer)?;
    let hd_swa = keys.usize("attention.key_length_swa")?;
    let hdv_swa = keys.usize_or("attention.value_length_swa", hd_swa)?;
    if hd_swa != hdv_swa || hp.head_dim != hp.head_dim_v || hd_swa == 0 || hd_swa % 2 != 0 {
        return Err(Error::metadata(
            key("attention.key_length_swa"),
            format!(
                "head widths {hd_swa}/{hdv_swa} (sliding), {}/{} (full): K and V must agree and be even",
                hp.head_dim, hp.head_dim_v
            ),
        ));
    }
    // llama.cpp: layers from n_layer - shared_kv_layers on reuse the cache of the last
    // earlier layer of the same kind.
    let shared = keys.usize_or("attention.shared_kv_layers", 0)?;
    let first_shared = n_layer.checked_sub(shared).ok_or_else(|| {
        Error::metadata(
            key("attention.shared_kv_layers"),
            format!("{shared} of {n_layer} layers"),
        )
    })?;
    let mut kv_from = vec![None; n_layer];
    for il in first_shared..n_layer {
        let src = (0..first_shared).rev().find(|&j| swa[j] == swa[il]).ok_or_else(|| {
            Error::metadata(
                key("attention.shared_kv_layers"),
                format!("layer {il} has no earlier layer of its kind to share K/V with"),
            )
        })?;
        kv_from[il] = Some(src);
    }
    hp.layers = (0..n_layer)
        .map(|il| {
            let hd = if swa[il] { hd_swa } else { hp.head_dim };
            LayerShape {
                n_head_kv: n_kv[il],
                head_dim: hd,
                head_dim_v: hd,
                n_ff: n_ff[il],
                has_v: tensors.contains_key(&format!("blk.{il}.attn_v.weight")),
            }
        })
        .collect();
    for (il, l) in hp.layers.iter().enumerate() {
        let p = format!("blk.{il}");
        if l.n_head_kv == 0 || hp.n_head % l.n_head_kv != 0 {
            return Err(Error::metadata(
                key("attention.head_count_kv"),
                format!("layer {il}: {} heads over {} KV heads", hp.n_head, l.n_head_kv),
            ));
        }
        let q = hp.n_head * l.head_dim;
        check_shape(weight(&format!("{p}.attn_q.weight"))?, &[hp.n_embd, q])?;
        check_shape(weight(&format!("{p}.attn_q_norm.weight"))?, &[l.head_dim])?;
        check_shape(weight(&format!("{p}.attn_output.weight"))?, &[q, hp.n_embd])?;
        if kv_from[il].is_none() {
            let kv = l.n_head_kv * l.head_dim;
            check_shape(weight(&format!("{p}.attn_k.weight"))?, &[hp.n_embd, kv])?;
            check_shape(weight(&format!("{p}.attn_k_norm.weight"))?, &[l.head_dim])?;
            if let Some(v) = tensors.get(&format!("{p}.attn_v.weight")) {
                check_shape(v, &[hp.n_embd, kv])?;
            }
        }
        check_shape(weight(&format!("{p}.ffn_gate.weight"))?, &[hp.n_embd, l.n_ff])?;
        check_shape(weight(&format!("{p}.ffn_down.weight"))?, &[l.n_ff, hp.n_embd])?;
    }
    for (il, &src) in kv_from.iter().enumerate() {
        if let Some(src) = src {
            let (a, s) = (hp.layers[il], hp.layers[src]);
            if (a.n_head_kv, a.head_dim, a.head_dim_v) != (s.n_head_kv, s.head_dim, s.head_dim_v) {
                return Err(Error::metadata(
                    key("attention.head_count_kv"),
                    format!("layer {il} shares the K/V of layer {src}, whose heads differ"),
                ));
            }
        }
    }
    hp.kv_from = kv_from;

    // Full layers: `rope.dimension_count` with `rope_freqs.weight`; sliding: `_swa` keys.
    if hp.rope.freq_factors {
        check_shape(weight(crate::model::graph::ROPE_FREQS)?, &[hp.rope.n_rot / 2])?;
    }
    let n_rot_swa = keys.usize_or("rope.dimension_count_swa", hd_swa)?;
    if n_rot_swa > hd_swa || n_rot_swa % 2 != 0 {
        return Err(Error::metadata(
            key("rope.dimension_count_swa"),
            format!("{n_rot_swa} does not fit head_dim {hd_swa}"),
        ));
    }
    hp.rope_swa.n_rot = n_rot_swa;
    hp.rope_swa.base = keys.f32_or("rope.freq_base_swa", hp.rope.base)?;
    hp.rope_swa.freq_factors = false;

    hp.embd_scale = Some((hp.n_embd as f32).sqrt());
    hp.final_softcap = keys.f32_opt("final_logit_softcapping")?.filter(|&c| c > 0.0);
    hp.attn_scale = 1.0;

    // Per-layer inputs: `per_layer_token_embd` [n_layer * n_ple, n_vocab],
    // `per_layer_model_proj` [n_embd, n_layer * n_ple], `per_layer_proj_norm` [n_ple].
    hp.n_embd_per_layer = keys.usize_or("embedding_length_per_layer_input", 0)?;
    if hp.n_embd_per_layer > 0 {
        let (n_ple, all) = (hp.n_embd_per_layer, hp.n_embd_per_layer * n_layer);
        check_shape(weight("per_layer_token_embd.weight")?, &[all, hp.n_vocab])?;
        check_shape(weight("per_layer_model_proj.weight")?, &[hp.n_embd, all])?;
        check_shape(weight("per_layer_proj_norm.weight")?, &[n_ple])?;
        for il in 0..n_layer {
            check_shape(weight(&format!("blk.{il}.inp_gate.weight"))?, &[hp.n_embd, n_ple])?;
            check_shape(weight(&format!("blk.{il}.proj.weight"))?, &[n_ple, hp.n_embd])?;
        }
    }

    // `blk.N.layer_output_scale.weight`: one value per layer, where present.
    hp.layer_out_scale = (0..n_layer)
        .map(|il| {
            let name = format!("blk.{il}.layer_output_scale.weight");
            tensors
                .get(&name)
                .map(|t| check_shape(t, &[1]))
                .transpose()
                .map(|t| t.is_some())
        })
        .collect::<Result<_>>()?;
    Ok(hp)
}

/// The per-layer inputs `[n_tokens, n_layer * n_ple]` (llama.cpp's `build_inp_per_layer` and
/// `project_per_layer_inputs`): (RMS-norm_{n_ple}(proj(x) / sqrt(n_embd)) +
/// per_layer_token_embd[token] · sqrt(n_ple)) / sqrt(2), x the scaled token embeddings.
fn per_layer_inputs(b: &mut Builder, x: NodeId) -> NodeId {
    let hp = b.hp;
    let (n_ple, all) = (hp.n_embd_per_layer, hp.n_embd_per_layer * hp.n_layer);
    let e = b.push(
        "inp_per_layer_rows",
        Op::GetRows {
            weight: "per_layer_token_embd.weight".into(),
        },
        all,
    );
    let s = (n_ple as f32).sqrt();
    let e = b.push("inp_per_layer_selected", Op::Scale { x: e, s }, all);
    let p = b.matmul(x, "per_layer_model_proj.weight", all, "per_layer_model_proj");
    let s = 1.0 / (hp.n_embd as f32).sqrt();
    let p = b.push("per_layer_proj_scaled", Op::Scale { x: p, s }, all);
    let eps = hp.rms_eps;
    let p = b.push(
        "per_layer_proj",
        Op::HeadNorm {
            x: p,
            weight: "per_layer_proj_norm.weight".into(),
            eps,
            head_dim: n_ple,
        },
        all,
    );
    let sum = b.add(p, e, "inp_per_layer_sum");
    let s = 1.0 / 2f32.sqrt();
    b.push("inp_per_layer", Op::Scale { x: sum, s }, all)
}

/// Q (+ K, V where the layer has its own cache), their norms and RoPE, attention, output.
fn attention(b: &mut Builder, il: usize, x: NodeId) -> NodeId {
    let hp = b.hp;
    let p = format!("blk.{il}");
    let l = hp.layer(il);
    let (hd, eps) = (l.head_dim, hp.rms_eps);
    let (q_w, kv_w) = (hp.n_head * hd, l.n_head_kv * hd);
    let rope = if hp.is_swa(il) { hp.rope_swa } else { hp.rope };
    let head_norm = |b: &mut Builder, x: NodeId, name: &str, width: usize| {
        b.push(
            format!("{p}.{name}"),
            Op::HeadNorm {
                x,
                weight: format!("{p}.{name}.weight"),
                eps,
                head_dim: hd,
            },
            width,
        )
    };
    let rope_of = |b: &mut Builder, x: NodeId, name: &str, n_heads: usize, width: usize| {
        b.push(
            format!("{p}.{name}"),
            Op::Rope {
                x,
                n_heads,
                head_dim: hd,
                rope,
            },
            width,
        )
    };
    let q = b.matmul(x, &format!("{p}.attn_q.weight"), q_w, &format!("{p}.attn_q"));
    let q = head_norm(b, q, "attn_q_norm", q_w);
    let q = rope_of(b, q, "attn_q_rope", hp.n_head, q_w);
    let kv_from = hp.kv_source(il);
    let (k, v) = match kv_from {
        // The shared layer writes nothing: its k and v inputs are never read.
        Some(_) => (q, q),
        None => {
            let k = b.matmul(x, &format!("{p}.attn_k.weight"), kv_w, &format!("{p}.attn_k"));
            // k_eq_v: a layer without `attn_v` takes V from the (unnormed) K projection.
            let v = if l.has_v {
                b.matmul(x, &format!("{p}.attn_v.weight"), kv_w, &format!("{p}.attn_v"))
            } else {
                k
            };
            let k = head_norm(b, k, "attn_k_norm", kv_w);
            let v = b.push(
                format!("{p}.attn_v_norm"),
                Op::HeadNormPlain {
                    x: v,
                    eps,
                    head_dim: hd,
                },
                kv_w,
            );
            let k = rope_of(b, k, "attn_k_rope", l.n_head_kv, kv_w);
            (k, v)
        }
    };
    let attn = Attn {
        layer: il,
        n_head: hp.n_head,
        n_head_kv: l.n_head_kv,
        head_dim: hd,
        head_dim_v: hd,
        scale: hp.attn_scale,
        window: if hp.is_swa(il) { hp.sliding_window } else { None },
        softcap: None,
        flash: b.flash(),
        sinks: false,
        kv_from,
        causal: true,
    };
    let a = b.push(format!("{p}.attn"), Op::Attention { q, k, v, attn }, q_w);
    b.matmul(
        a,
        &format!("{p}.attn_output.weight"),
        hp.n_embd,
        &format!("{p}.attn_out"),
    )
}

pub fn build(mut b: Builder) -> Graph {
    let hp = b.hp;
    let mut x = b.embed();
    let ple = (hp.n_embd_per_layer > 0).then(|| per_layer_inputs(&mut b, x));
    for il in 0..hp.n_layer {
        let p = format!("blk.{il}");
        let h = b.norm(x, &format!("{p}.attn_norm.weight"), &format!("{p}.attn_norm"));
        let a = attention(&mut b, il, h);
        let a = b.norm(
            a,
            &format!("{p}.post_attention_norm.weight"),
            &format!("{p}.attn_post_norm"),
        );
        x = b.add(x, a, &format!("{p}.attn_res"));
        x = b.with_ffn(x, |b, x| {
            let n_ff = hp.layer(il).n_ff;
            let h = b.norm(x, &format!("{p}.ffn_norm.weight"), &format!("{p}.ffn_norm"));
            let gate = b.matmul(h, &format!("{p}.ffn_gate.weight"), n_ff, &format!("{p}.ffn_gate"));
            let up = b.matmul(h, &format!("{p}.ffn_up.weight"), n_ff, &format!("{p}.ffn_up"));
            let f = b.push(format!("{p}.ffn_geglu"), Op::Geglu { gate, up }, n_ff);
            let f = b.matmul(f, &format!("{p}.ffn_down.weight"), hp.n_embd, &format!("{p}.ffn_out"));
            let f = b.norm(f, &format!("{p}.post_ffw_norm.weight"), &format!("{p}.ffn_post_norm"));
            b.add(x, f, &format!("{p}.ffn_res"))
        });
        if let Some(ple) = ple {
            // x + post_norm(proj(gelu(inp_gate(x)) * per_layer_inputs[il])).
            let n_ple = hp.n_embd_per_layer;
            let g = b.matmul(x, &format!("{p}.inp_gate.weight"), n_ple, &format!("{p}.pe_gate"));
            let up = b.push(
                format!("{p}.pe_in"),
                Op::Slice {
                    x: ple,
                    col0: il * n_ple,
                },
                n_ple,
            );
            let g = b.push(format!("{p}.pe_geglu"), Op::Geglu { gate: g, up }, n_ple);
            let g = b.matmul(g, &format!("{p}.proj.weight"), hp.n_embd, &format!("{p}.pe_proj"));
            let g = b.norm(g, &format!("{p}.post_norm.weight"), &format!("{p}.pe_out"));
            x = b.add(x, g, &format!("{p}.pe_res"));
        }
        if hp.layer_out_scale.get(il) == Some(&true) {
            let weight = format!("{p}.layer_output_scale.weight");
            x = b.push(format!("{p}.out_scaled"), Op::ScaleBy { x, weight }, hp.n_embd);
        }
    }
    b.head(x)
}
