//! Each kernel's launch parameters as a named `#[repr(C)]` struct: the ABI between the schedule
//! and the kernels. The WGSL op declares the same fields as `struct Params` (binding 0), the
//! `.cu` file as a struct of this name read through `params<T>(p)` (`cuda/common.cuh`); tests
//! check both against `FIELDS`. A launch carries any of them in its 16-word (64-byte) slot.
//!
//! Fields are u32 or f32, 4 bytes each, with WGSL's `_pad` members where the shader has them,
//! so the struct is byte for byte the uniform the shader reads.

use bytemuck::{Pod, Zeroable};

/// The scalar type of a parameter field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    U32,
    F32,
}

/// A Rust type that can be a parameter field.
pub trait Field {
    const SCALAR: Scalar;
}

impl Field for u32 {
    const SCALAR: Scalar = Scalar::U32;
}

impl Field for f32 {
    const SCALAR: Scalar = Scalar::F32;
}

/// One field: name, byte offset, scalar type.
pub type FieldInfo = (&'static str, u32, Scalar);

/// A kernel's parameter block.
pub trait KernelParams: Pod {
    /// The struct's name in `cuda/`.
    const NAME: &'static str;
    /// The fields in declaration order.
    const FIELDS: &'static [FieldInfo];

    /// The 16 words a launch carries (unused words zero).
    fn words(&self) -> [u32; 16] {
        let mut w = [0u32; 16];
        bytemuck::bytes_of_mut(&mut w)[..size_of::<Self>()].copy_from_slice(bytemuck::bytes_of(self));
        w
    }

    /// The struct back from a launch's words.
    fn from_words(w: &[u32; 16]) -> Self {
        bytemuck::pod_read_unaligned(&bytemuck::bytes_of(w)[..size_of::<Self>()])
    }
}

macro_rules! params {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident: $t:ty,)* }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
        }

        const _: () = assert!(size_of::<$name>() <= 64, "a params struct fits the 64-byte slot");

        impl KernelParams for $name {
            const NAME: &'static str = stringify!($name);
            const FIELDS: &'static [FieldInfo] =
                &[$((stringify!($f), std::mem::offset_of!($name, $f) as u32, <$t as Field>::SCALAR),)*];
        }
    };
}

params! {
    /// `quantize_act`: rows of `k` elements (whole blocks) for `n` tokens.
    QuantizeActParams {
        k: u32,
        n: u32,
        /// Workgroups per 256 elements: 1 (or 0), or 2 for q8_K where a block each would leave
        /// compute units idle (each of the two reads the whole block, writes its half).
        split: u32,
    }
}

params! {
    /// `matmul_vec` and `matmul`: y[t, row0 + r] = x[t, :] · W[r, :] for one weight part.
    MatmulParams {
        /// Row length (elements).
        k: u32,
        /// Width of y: all rows of the weight.
        m: u32,
        /// Rows in this part.
        rows: u32,
        /// First row of this part.
        row0: u32,
        /// Rows of x (tokens; with experts, tokens × slots where x is per slot).
        n: u32,
        /// `matmul_vec_id`: slots per token (0 for the plain matmuls); y has one row per slot.
        ids: u32,
        /// `matmul_vec_id`: 1 where x has one row per slot, 0 where the token's row is shared.
        x_slot: u32,
        /// `matmul_vec_id`: experts in the weight (`rows` rows each).
        n_expert: u32,
        /// 1: y += x · W (the residual add fused into the matmul: y holds the other addend).
        acc: u32,
        /// 1: y = x · W + b (the bias add fused into the matmul: binding 4 holds b, f32, one
        /// value per row of the weight). Not with experts.
        bias: u32,
        /// CUDA's tensor-core tiles (`cuda/matmul.cu`'s matmul_mma, `Variant::mma_stream_k`):
        /// the last `sk_tiles` tiles are cut into runs of steps that `sk_workers` blocks share
        /// out evenly, after one block for each other tile. 0: a block per tile (and run of a
        /// split). The schedule leaves both 0; the tensor-core launch sets them.
        sk_tiles: u32,
        sk_workers: u32,
    }
}

params! {
    /// `matmul_vec_pack`: y_s[t, r] = x[t, :] · W_s[r, :] (+ b_s[r]) for the 2 or 3 weights
    /// of one pack (`gpu::packs`), their rows taken in order as one matrix.
    MatmulPackParams {
        /// Row length (elements), the same for every member.
        k: u32,
        /// Rows of x (tokens).
        n: u32,
        /// Rows of each member (0 for a third where there are two).
        rows0: u32,
        rows1: u32,
        rows2: u32,
        /// Byte offsets of members 1 and 2 from member 0, where binding 1 starts.
        off1: u32,
        off2: u32,
        /// 1: binding 4 is the pack of the members' f32 biases, each added to its rows;
        /// `boff1`/`boff2` are the element offsets of biases 1 and 2 from the first.
        bias: u32,
        boff1: u32,
        boff2: u32,
        /// 1: binding 2 holds the rows before an RMS norm folded in (its f32 weight at binding
        /// 7, `eps`), which each workgroup normalizes as `rms_norm` does, then (`act` = 1 + the
        /// format's `quantize_act` index; 0 for float weights) rounds as `quantize_act` does.
        norm: u32,
        eps: f32,
        act: u32,
    }
}

params! {
    /// `get_rows`: the ids in rows `row0 .. row0 + rows` of a weight part, rows of `k` elements.
    GetRowsParams {
        k: u32,
        rows: u32,
        row0: u32,
        /// Tokens.
        n: u32,
    }
}

params! {
    /// `add_bias` and `scale_by`: `n` elements, rows of `width` (`scale_by`: 1, the weight's
    /// one value for every element).
    AddBiasParams {
        n: u32,
        width: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

params! {
    /// `rms_norm`: `rows` rows of `width` (a head norm: rows one head wide).
    RmsNormParams {
        width: u32,
        eps: f32,
        rows: u32,
        /// 1: no weight (`HeadNormPlain`, a bare `ggml_rms_norm`); binding 1 is never read.
        plain: u32,
        /// 0, or 1 + `quantize_act`'s format index (`ACT_QTYPES`): the rows also rounded as
        /// `quantize_act` rounds them, into binding 4 (never written with 0).
        act: u32,
        /// Elements of a row each workgroup writes (and rounds), whole activation blocks or 128,
        /// half a q8_K block (whose scale the workgroup then computes from the whole block): a
        /// row's `ceil(width / slice)` workgroups each sum the whole row's squares, then take
        /// their slice, so a step of few rows still spreads over the device. 0: one workgroup a
        /// row.
        slice: u32,
    }
}

params! {
    /// `rope`: `n` tokens of `n_heads` heads of `head_dim`, the first `n_rot` rotated.
    RopeParams {
        n_heads: u32,
        head_dim: u32,
        n_rot: u32,
        /// 0 normal (adjacent pairs), 1 NeoX (halves).
        neox: u32,
        /// Tokens.
        n: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

params! {
    /// `kv_store`: `n` tokens of K rows `kw` wide and V rows `vw` wide.
    KvStoreParams {
        /// K row width (n_head_kv · head_dim).
        kw: u32,
        /// V row width (n_head_kv · head_dim_v).
        vw: u32,
        /// Tokens.
        n: u32,
        /// K's head width (for the rope).
        head_dim: u32,
        /// 0, or the rotated dimensions of the rope folded into the store: K is read as the
        /// rope would have written it (binding 6: its table).
        n_rot: u32,
        /// 1: the folded rope's pairs are (i, i + n_rot / 2).
        neox: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

params! {
    /// `attention`: one (q head, token) per workgroup.
    AttentionParams {
        n_head: u32,
        n_head_kv: u32,
        head_dim: u32,
        head_dim_v: u32,
        scale: f32,
        /// Sliding window; 0 = none.
        window: u32,
        /// 0 = none.
        softcap: f32,
        /// Tokens.
        n: u32,
        /// 1: the flash numerics (one online-softmax pass).
        flash: u32,
        /// 1: binding 6 holds one softmax sink logit per head (gpt-oss).
        sinks: u32,
        /// The first token of this launch: a prefill's queries run in launches of at most
        /// `schedule::ATTN_TOKENS` tokens (bounded GPU work per submit).
        t0: u32,
        /// 0, or the rotated dimensions of the rope folded into the attention: q is read as
        /// the rope would have written it (binding 7: its table).
        n_rot: u32,
        /// 1: the folded rope's pairs are (i, i + n_rot / 2).
        neox: u32,
        /// 0, or 1 + `quantize_act`'s format index (`ACT_QTYPES`): the output also rounded for
        /// the quantized matmul reading it (binding 8), blocks within a head.
        act: u32,
        /// The split-KV kernels (`attention_split`, `attention_reduce`): the ranges a token's
        /// positions are cut into, at most (whole 64-position tiles each; fewer where the
        /// context is short). `attention_reduce` combines this many slots per (token, head).
        n_split: u32,
        /// `attention_split`: the query heads one workgroup takes, all of one KV head.
        hg: u32,
    }
}

params! {
    /// `attention_tile`: `tq` query tokens × `hg` query heads (of one KV head) per workgroup
    /// over one of `n_split` ranges of their positions, `kt` positions at a time; the rest as
    /// `AttentionParams` (`attention_reduce` then takes the sinks and the fused rounding).
    AttentionTileParams {
        n_head: u32,
        n_head_kv: u32,
        head_dim: u32,
        head_dim_v: u32,
        scale: f32,
        /// Sliding window; 0 = none.
        window: u32,
        /// 0 = none.
        softcap: f32,
        /// Tokens.
        n: u32,
        /// The first token of this launch.
        t0: u32,
        /// 0, or the rotated dimensions of the rope folded into the attention.
        n_rot: u32,
        /// 1: the folded rope's pairs are (i, i + n_rot / 2).
        neox: u32,
        /// The ranges a run of one sequence's tokens cuts its positions into (whole 64-position
        /// tiles each).
        n_split: u32,
        /// Query heads per workgroup, all of one KV head.
        hg: u32,
        /// Query tokens per workgroup: a power of two, so tiles never cross a launch's
        /// `ATTN_TOKENS`.
        tq: u32,
        /// Positions per K / V tile in workgroup memory.
        kt: u32,
        _pad0: u32,
    }
}

params! {
    /// The element-wise binary ops (`add`, `mul`, `swiglu`, `geglu`): `n` elements.
    BinaryParams {
        n: u32,
        /// 0, or 1 + `quantize_act`'s format index (`ACT_QTYPES`): `swiglu` / `geglu` also round
        /// their output for the quantized matmul reading it (binding 4), one block per
        /// invocation.
        act: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

params! {
    /// The element-wise ops with a scalar (`scale`, `softcap`): `n` elements, the scalar `s`.
    UnaryParams {
        n: u32,
        s: f32,
        _pad0: u32,
        _pad1: u32,
    }
}

params! {
    /// `layer_norm`: `rows` rows of `width`, f32 weight and bias.
    LayerNormParams {
        width: u32,
        eps: f32,
        rows: u32,
        _pad0: u32,
    }
}

params! {
    /// `add_pos_rows`: `n` elements in rows of `width`, each plus its token's row of an
    /// `[n_pos][width]` f32 position table.
    AddPosRowsParams {
        n: u32,
        width: u32,
        n_pos: u32,
        _pad0: u32,
    }
}

params! {
    /// `moe_route`: `rows` rows of `n_expert` router logits into rows of 2k (ids, weights).
    MoeRouteParams {
        n_expert: u32,
        k: u32,
        rows: u32,
        /// 0: softmax over all experts; 1: softmax over the k chosen logits (gpt-oss).
        gating: u32,
        /// 1: weights divided by their sum.
        norm: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

params! {
    /// The per-slot ops of a mixture of experts (`add_bias_id`, `moe_sum`): rows of `k` slots
    /// of `width`; `n` output elements.
    MoeSlotParams {
        n: u32,
        width: u32,
        k: u32,
        n_expert: u32,
    }
}

params! {
    /// `swiglu_oai`: `n` elements, gpt-oss' `alpha` and clamp `limit`.
    SwigluOaiParams {
        n: u32,
        alpha: f32,
        limit: f32,
        _pad0: u32,
    }
}

params! {
    /// `sigmoid_gate`: `n` elements in rows of `width`, one gate per row.
    SigmoidGateParams {
        n: u32,
        width: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

params! {
    /// `slice`: columns `col0 .. col0 + width` of each row of `src_width`; `n` output elements.
    SliceParams {
        n: u32,
        width: u32,
        src_width: u32,
        col0: u32,
    }
}

params! {
    /// `argmax` over `n` logits starting at element `offset`: with `parts` ≤ 1 one workgroup
    /// writes the id; else `stage` 0 on `parts` workgroups writes each slice's best (value, id)
    /// after the id's word, and `stage` 1 on one workgroup reduces them to the id.
    ArgmaxParams {
        n: u32,
        offset: u32,
        parts: u32,
        stage: u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_the_fields_in_order() {
        let p = RmsNormParams {
            width: 7,
            eps: 1e-5,
            rows: 3,
            ..Default::default()
        };
        let mut want = [0u32; 16];
        want[..3].copy_from_slice(&[7, 1e-5f32.to_bits(), 3]);
        assert_eq!(p.words(), want);
        assert_eq!(
            RmsNormParams::FIELDS,
            &[
                ("width", 0, Scalar::U32),
                ("eps", 4, Scalar::F32),
                ("rows", 8, Scalar::U32),
                ("plain", 12, Scalar::U32),
                ("act", 16, Scalar::U32),
                ("slice", 20, Scalar::U32)
            ]
        );
        assert_eq!(RmsNormParams::from_words(&p.words()), p);
    }
}
