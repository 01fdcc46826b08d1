//! Hyperparameters, read from metadata with fallback chains (the architecture's own prefix,
//! then `llama.*`) and checked against the real tensor shapes (principle 3).

use crate::error::{Error, Result};
use crate::gguf::Metadata;
use crate::tensor::Tensor;

/// Weights by canonical name.
pub type Weights = std::collections::HashMap<String, Tensor>;

/// How RoPE pairs dimensions: `Norm` rotates (2i, 2i+1) — llama's GGUF Q/K rows are permuted
/// for this; `Neox` rotates (i, i + n_rot/2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum RopeMode {
    Norm,
    Neox,
}

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Rope {
    pub mode: RopeMode,
    /// Dimensions rotated per head (`rope.dimension_count`, default head_dim).
    pub n_rot: usize,
    pub base: f32,
    /// 1 / scaling factor (`rope.scaling.factor` with type `linear` or `yarn`).
    pub freq_scale: f32,
    /// YaRN's frequency mix and magnitude (`rope.scaling.type` yarn); `None`: plain RoPE.
    pub yarn: Option<Yarn>,
    /// Multiplies the rotated values by 1 + scale·ln(1 + floor(pos / floor)) (Llama 4 and
    /// Mistral 3 temperature tuning, applied to Q only).
    pub temp: Option<AttnTemp>,
    /// Pair i turns by theta_i / ff_i, ff = `rope_freqs.weight` (ggml's `freq_factors`; Llama 3,
    /// Gemma 4's full layers).
    pub freq_factors: bool,
}

impl Rope {
    /// Plain RoPE (no YaRN, no temperature).
    pub fn new(mode: RopeMode, n_rot: usize, base: f32, freq_scale: f32) -> Rope {
        Rope {
            mode,
            n_rot,
            base,
            freq_scale,
            yarn: None,
            temp: None,
            freq_factors: false,
        }
    }
}

/// The YaRN parameters of ggml's `rope_yarn` (ggml-cpu `ops.cpp`), as llama.cpp's context
/// derives them (`llama_context::llama_context`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Yarn {
    /// Weight of the extrapolated frequency at the ramp's low end (1 for YaRN).
    pub ext_factor: f32,
    /// Multiplies cos and sin; ggml multiplies it by 1 + 0.1·ln(1 / freq_scale) again.
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// `rope.scaling.original_context_length`.
    pub n_ctx_orig: u32,
}

/// Llama 4's attention temperature (`attention.temperature_scale`), as `llm_graph_input_attn_temp`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct AttnTemp {
    pub scale: f32,
    /// Positions per step of the floor (`rope.scaling.original_context_length`), ≥ 1.
    pub floor: u32,
}

impl AttnTemp {
    /// The factor at position `pos`: computed in f64 and rounded once, as llama.cpp's
    /// `llm_graph_input_attn_temp::set_input` does (pos / floor in f32).
    pub fn factor(&self, pos: u32) -> f32 {
        let steps = ((pos as f32) / self.floor as f32).floor() as f64;
        ((steps + 1.0).ln() * self.scale as f64 + 1.0) as f32
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct HParams {
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Per-head width of Q and K (`attention.key_length`), and of V (`value_length`).
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub n_ff: usize,
    pub rms_eps: f32,
    pub rope: Rope,
    /// RoPE of sliding-window layers where it differs (Gemma 3: base 10 000).
    pub rope_swa: Rope,
    /// Sliding-window size, and which layers use it (`true` = sliding).
    pub sliding_window: Option<usize>,
    pub swa_layers: Vec<bool>,
    pub attn_scale: f32,
    pub attn_softcap: Option<f32>,
    pub final_softcap: Option<f32>,
    /// Multiplies the token embeddings (Gemma: sqrt(n_embd)).
    pub embd_scale: Option<f32>,
    pub tied_output: bool,
    /// Mixture of experts: experts per layer (0: a dense FFN), chosen per token, and their FFN
    /// width; the shared expert's width (Qwen MoE).
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff_exp: usize,
    pub n_ff_shexp: usize,
    /// Attention-only graphs: every feed-forward block (dense or experts) left out
    /// (`Model::without_ffn`). The outputs are then not the model's.
    pub drop_ffn: bool,
    /// Multiplies each attention and FFN output before its residual add (Granite
    /// `residual_scale`).
    pub residual_scale: Option<f32>,
    /// Divides the logits (Granite `logit_scale`).
    pub logit_scale: Option<f32>,
    /// Layers whose Q/K skip RoPE (`true` = NoPE; SmolLM3 every 4th).
    pub nope_layers: Vec<bool>,
    /// Per-layer attention and FFN widths where they differ between layers (Gemma 4); empty:
    /// every layer has the uniform `n_head_kv`, `head_dim`, `head_dim_v`, `n_ff`.
    pub layers: Vec<LayerShape>,
    /// Per layer, the earlier layer whose K/V cache it reads instead of writing its own
    /// (Gemma 4's KV-shared layers); empty: none.
    pub kv_from: Vec<Option<usize>>,
    /// Per-layer input embeddings' width per layer (Gemma 4 `embedding_length_per_layer_input`;
    /// 0: none).
    pub n_embd_per_layer: usize,
    /// Layers whose output is multiplied by `blk.N.layer_output_scale.weight` (Gemma 4);
    /// empty: none.
    pub layer_out_scale: Vec<bool>,
    /// LayerNorm's epsilon (`attention.layer_norm_epsilon`; BERT).
    pub norm_eps: f32,
    /// How an embedding model pools its tokens' hidden states into one vector
    /// (`pooling_type`); None: not an embedding model.
    pub pooling: Option<Pooling>,
    /// The pooled vector is scaled to unit length (sentence-transformers' `Normalize`).
    pub normalize: bool,
}

/// llama.cpp's `pooling_type` values an embedding model can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The mean over the sequence's tokens.
    Mean,
    /// The first token's (`[CLS]`).
    Cls,
    /// The last token's (decoder embedding models).
    Last,
}

impl Pooling {
    /// GGUF `{arch}.pooling_type`: 0 none, 1 mean, 2 cls, 3 last; rank (4) is a reranker's.
    pub fn from_gguf(key: &str, v: u64) -> Result<Option<Pooling>> {
        match v {
            0 => Ok(None),
            1 => Ok(Some(Pooling::Mean)),
            2 => Ok(Some(Pooling::Cls)),
            3 => Ok(Some(Pooling::Last)),
            _ => Err(Error::metadata(
                key,
                format!("pooling type {v} is not supported (0 none, 1 mean, 2 cls, 3 last)"),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
}

/// One layer's widths where a model's layers differ (Gemma 4's sliding and full layers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LayerShape {
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub n_ff: usize,
    /// The layer has its own V projection; without one, V is the K projection (Gemma 4's
    /// full layers, `attention_k_eq_v`).
    pub has_v: bool,
}

impl HParams {
    pub fn n_embd_q(&self) -> usize {
        self.n_head * self.head_dim
    }
    pub fn n_embd_k(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
    pub fn n_embd_v(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }
    pub fn is_swa(&self, layer: usize) -> bool {
        self.swa_layers.get(layer).copied().unwrap_or(false)
    }
    pub fn is_nope(&self, layer: usize) -> bool {
        self.nope_layers.get(layer).copied().unwrap_or(false)
    }
    /// Layer `il`'s widths: its own where the model has per-layer ones, else the uniform ones.
    pub fn layer(&self, il: usize) -> LayerShape {
        self.layers.get(il).copied().unwrap_or(LayerShape {
            n_head_kv: self.n_head_kv,
            head_dim: self.head_dim,
            head_dim_v: self.head_dim_v,
            n_ff: self.n_ff,
            has_v: true,
        })
    }
    /// Layer `il`'s K and V cache row widths (0 for a layer that reads another's cache).
    pub fn kv_widths(&self, il: usize) -> (usize, usize) {
        if self.kv_source(il).is_some() {
            return (0, 0);
        }
        let l = self.layer(il);
        (l.n_head_kv * l.head_dim, l.n_head_kv * l.head_dim_v)
    }
    /// The widest K and V rows of any layer (what a uniform cache must hold).
    pub fn max_kv_widths(&self) -> (usize, usize) {
        (0..self.n_layer).fold((self.n_embd_k(), self.n_embd_v()), |(k, v), il| {
            let (kl, vl) = self.kv_widths(il);
            (k.max(kl), v.max(vl))
        })
    }
    /// The layer whose K/V cache layer `il` reads instead of its own.
    pub fn kv_source(&self, il: usize) -> Option<usize> {
        self.kv_from.get(il).copied().flatten()
    }
}

/// Metadata lookups for one architecture: `{arch}.{key}`, then `llama.{key}`.
pub struct Keys<'a> {
    pub md: &'a Metadata,
    pub arch: &'a str,
}

impl Keys<'_> {
    fn find(&self, key: &str) -> (String, bool) {
        let own = format!("{}.{key}", self.arch);
        if self.md.contains(&own) {
            return (own, true);
        }
        let fallback = format!("llama.{key}");
        let found = self.md.contains(&fallback);
        (if found { fallback } else { own }, found)
    }

    pub fn u64_opt(&self, key: &str) -> Result<Option<u64>> {
        let (k, found) = self.find(key);
        if !found {
            return Ok(None);
        }
        // Per-layer arrays (e.g. head_count_kv) are accepted when all entries agree.
        if let Some(arr) = self.md.get_array(&k).ok().flatten() {
            let vals: Vec<u64> = arr.iter().filter_map(|v| v.as_u64()).collect();
            return match vals.first() {
                Some(&v) if vals.len() == arr.len() && vals.iter().all(|&x| x == v) => Ok(Some(v)),
                _ => Err(Error::metadata(k, "per-layer values differ; not supported")),
            };
        }
        self.md.get_u64(&k)
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self
            .u64_opt(key)?
            .ok_or_else(|| Error::metadata(format!("{}.{key}", self.arch), "missing"))?;
        to_usize(&format!("{}.{key}", self.arch), v)
    }

    /// A per-layer key: an array of `n_layer` counts, or one count for every layer.
    pub fn usize_layers(&self, key: &str, n_layer: usize) -> Result<Vec<usize>> {
        let (k, found) = self.find(key);
        if !found {
            return Err(Error::metadata(k, "missing"));
        }
        match self.md.get_array(&k).ok().flatten() {
            Some(arr) => {
                let vals = arr
                    .iter()
                    .map(|v| v.as_u64().ok_or_else(|| Error::metadata(&k, "not an array of counts")))
                    .map(|v| v.and_then(|v| to_usize(&k, v)))
                    .collect::<Result<Vec<usize>>>()?;
                if vals.len() != n_layer {
                    return Err(Error::metadata(
                        k,
                        format!("{} values for {n_layer} layers", vals.len()),
                    ));
                }
                Ok(vals)
            }
            None => Ok(vec![self.usize(key)?; n_layer]),
        }
    }

    pub fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        match self.u64_opt(key)? {
            Some(v) => to_usize(&format!("{}.{key}", self.arch), v),
            None => Ok(default),
        }
    }

    pub fn f32_opt(&self, key: &str) -> Result<Option<f32>> {
        let (k, found) = self.find(key);
        if !found {
            return Ok(None);
        }
        Ok(self.md.get_f64(&k)?.map(|v| v as f32))
    }

    pub fn f32_or(&self, key: &str, default: f32) -> Result<f32> {
        Ok(self.f32_opt(key)?.unwrap_or(default))
    }

    pub fn str_opt(&self, key: &str) -> Result<Option<&str>> {
        let (k, found) = self.find(key);
        if !found {
            return Ok(None);
        }
        self.md.get_str(&k)
    }
}

/// Caps every count at something a real model could have: a hostile file must not make us
/// allocate a KV cache for 2^40 layers.
fn to_usize(key: &str, v: u64) -> Result<usize> {
    if v > 1 << 24 {
        return Err(Error::metadata(key, format!("value {v} is absurd")));
    }
    Ok(v as usize)
}

/// The common reading shared by every architecture; each arch file then adjusts its own fields.
pub fn read_common(keys: &Keys, tensors: &Weights, rope_mode: RopeMode) -> Result<HParams> {
    read_base(keys, tensors, rope_mode, false)
}

/// [`read_common`] for a model whose `attention.head_count_kv` and `feed_forward_length` are
/// per-layer arrays (Gemma 4): the uniform fields get their largest values and the caller
/// fills `HParams::layers` and checks each layer's Q/K shapes itself.
pub fn read_layered(keys: &Keys, tensors: &Weights, rope_mode: RopeMode) -> Result<HParams> {
    read_base(keys, tensors, rope_mode, true)
}

fn read_base(keys: &Keys, tensors: &Weights, rope_mode: RopeMode, layered: bool) -> Result<HParams> {
    let n_embd = keys.usize("embedding_length")?;
    let n_layer = keys.usize("block_count")?;
    let n_head = keys.usize("attention.head_count")?;
    let max = |v: Vec<usize>| v.into_iter().max().unwrap_or(0);
    let n_head_kv = if layered {
        max(keys.usize_layers("attention.head_count_kv", n_layer.min(1 << 16))?)
    } else {
        keys.usize_or("attention.head_count_kv", n_head)?
    };
    // Mixture-of-experts files may give only the experts' width.
    let n_ff = match keys.u64_opt("expert_count")? {
        _ if layered => max(keys.usize_layers("feed_forward_length", n_layer.min(1 << 16))?),
        Some(n) if n > 0 => keys.usize_or("feed_forward_length", 0)?,
        _ => keys.usize("feed_forward_length")?,
    };
    if n_embd == 0 || n_layer == 0 || n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
        return Err(Error::metadata(
            format!("{}.attention.head_count", keys.arch),
            format!("n_embd {n_embd}, n_layer {n_layer}, n_head {n_head}, n_head_kv {n_head_kv} are inconsistent"),
        ));
    }
    // Trust the tensors over the count: a file claiming millions of layers must not make us
    // build a graph for them before the first missing weight is noticed.
    let last = format!("blk.{}.attn_q.weight", n_layer - 1);
    if tensors.len() < n_layer || !tensors.contains_key(&last) {
        return Err(Error::metadata(
            format!("{}.block_count", keys.arch),
            format!("{n_layer} layers, but the file has no '{last}'"),
        ));
    }
    let head_dim = keys.usize_or("attention.key_length", n_embd / n_head)?;
    let head_dim_v = keys.usize_or("attention.value_length", head_dim)?;
    if head_dim == 0 || head_dim % 2 != 0 {
        return Err(Error::metadata(
            format!("{}.attention.key_length", keys.arch),
            format!("head_dim {head_dim} must be even"),
        ));
    }

    let emb = tensors
        .get("token_embd.weight")
        .ok_or_else(|| Error::MissingTensor("token_embd.weight".into()))?;
    let n_vocab = emb.shape.get(1).copied().unwrap_or(0) as usize;
    check_shape(emb, &[n_embd, n_vocab])?;
    if !layered {
        // Trust the bytes: the K projection's rows give the real KV width.
        let k = tensors
            .get("blk.0.attn_k.weight")
            .ok_or_else(|| Error::MissingTensor("blk.0.attn_k.weight".into()))?;
        check_shape(k, &[n_embd, n_head_kv * head_dim])?;
        let q = tensors
            .get("blk.0.attn_q.weight")
            .ok_or_else(|| Error::MissingTensor("blk.0.attn_q.weight".into()))?;
        check_shape(q, &[n_embd, n_head * head_dim])?;
    }

    let n_rot = keys.usize_or("rope.dimension_count", head_dim)?;
    if n_rot > head_dim || n_rot % 2 != 0 {
        return Err(Error::metadata(
            format!("{}.rope.dimension_count", keys.arch),
            format!("{n_rot} does not fit head_dim {head_dim}"),
        ));
    }
    let base = keys.f32_or("rope.freq_base", 10_000.0)?;
    let mut freq_scale = 1.0;
    let mut yarn = false;
    let scaling = keys.str_opt("rope.scaling.type")?.unwrap_or("none");
    let factor = keys.f32_opt("rope.scaling.factor")?;
    match (scaling, factor) {
        ("none", _) | (_, None) => {}
        (_, Some(f)) if f <= 0.0 || !f.is_finite() => {
            return Err(Error::metadata(
                format!("{}.rope.scaling.factor", keys.arch),
                format!("{f} is not positive"),
            ))
        }
        ("linear", Some(f)) => freq_scale = 1.0 / f,
        ("yarn", Some(f)) => {
            freq_scale = 1.0 / f;
            yarn = true;
        }
        (other, Some(_)) => {
            return Err(Error::metadata(
                format!("{}.rope.scaling.type", keys.arch),
                format!("'{other}' scaling is not supported"),
            ))
        }
    }
    let mut rope = Rope::new(rope_mode, n_rot, base, freq_scale);
    if yarn {
        rope.yarn = Some(read_yarn(keys, freq_scale)?);
    }
    rope.freq_factors = tensors.contains_key(super::graph::ROPE_FREQS);

    Ok(HParams {
        n_vocab,
        n_ctx_train: keys.usize_or("context_length", 4096)?,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        head_dim,
        head_dim_v,
        n_ff,
        rms_eps: keys.f32_or("attention.layer_norm_rms_epsilon", 1e-5)?,
        rope,
        rope_swa: rope,
        sliding_window: None,
        swa_layers: vec![false; n_layer],
        attn_scale: 1.0 / (head_dim as f32).sqrt(),
        attn_softcap: None,
        final_softcap: None,
        embd_scale: None,
        tied_output: tensors.get("output.weight").is_none(),
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        n_ff_shexp: 0,
        drop_ffn: false,
        residual_scale: None,
        logit_scale: None,
        nope_layers: vec![false; n_layer],
        layers: Vec::new(),
        kv_from: Vec::new(),
        n_embd_per_layer: 0,
        layer_out_scale: Vec::new(),
        norm_eps: keys.f32_or("attention.layer_norm_epsilon", 1e-5)?,
        pooling: match keys.u64_opt("pooling_type")? {
            Some(v) => Pooling::from_gguf(&format!("{}.pooling_type", keys.arch), v)?,
            None => None,
        },
        normalize: true,
    })
}

/// llama.cpp's `LLAMA_MAX_EXPERTS`: a file claiming more is refused.
pub const MAX_EXPERTS: usize = 512;

/// The mixture-of-experts keys (`expert_count`, `expert_used_count`, the experts' FFN width:
/// `expert_feed_forward_length`, else `feed_forward_length` as Mixtral's `llama` files have
/// it), checked against layer 0's expert tensors.
pub fn read_moe(keys: &Keys, tensors: &Weights, hp: &mut HParams) -> Result<()> {
    let key = |k: &str| format!("{}.{k}", keys.arch);
    let n_expert = keys.usize_or("expert_count", 0)?;
    let n_used = keys.usize_or("expert_used_count", 0)?;
    if n_expert == 0 || n_expert > MAX_EXPERTS {
        return Err(Error::metadata(
            key("expert_count"),
            format!("{n_expert} experts (a mixture of experts needs 1..={MAX_EXPERTS})"),
        ));
    }
    if n_used == 0 || n_used > n_expert {
        return Err(Error::metadata(
            key("expert_used_count"),
            format!("{n_used} experts per token of {n_expert}"),
        ));
    }
    hp.n_expert = n_expert;
    hp.n_expert_used = n_used;
    hp.n_ff_exp = keys.usize_or("expert_feed_forward_length", hp.n_ff)?;
    hp.n_ff_shexp = keys.usize_or("expert_shared_feed_forward_length", 0)?;
    let weight = |name: &str| tensors.get(name).ok_or_else(|| Error::MissingTensor(name.to_string()));
    check_shape(weight("blk.0.ffn_gate_inp.weight")?, &[hp.n_embd, n_expert])?;
    for name in ["ffn_gate_exps", "ffn_up_exps"] {
        check_shape(
            weight(&format!("blk.0.{name}.weight"))?,
            &[hp.n_embd, hp.n_ff_exp, n_expert],
        )?;
    }
    check_shape(
        weight("blk.0.ffn_down_exps.weight")?,
        &[hp.n_ff_exp, hp.n_embd, n_expert],
    )?;
    Ok(())
}

/// YaRN's parameters as llama.cpp derives them: ext_factor 1; attn_factor = mscale(factor) /
/// mscale_all_dim(factor) with `rope.scaling.yarn_log_multiplier` (mscale 1), else
/// mscale(factor), then divided by the 1 + 0.1·ln(factor) that ggml's `rope_yarn` multiplies
/// back in, times `rope.scaling.attn_factor`; all in f32 as llama.cpp computes it.
fn read_yarn(keys: &Keys, freq_scale: f32) -> Result<Yarn> {
    let mscale = |scale: f32, m: f32| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
    let factor = 1.0 / freq_scale;
    let log_mul = keys.f32_or("rope.scaling.yarn_log_multiplier", 0.0)?;
    let mut attn_factor = if log_mul != 0.0 {
        mscale(factor, 1.0) / mscale(factor, log_mul)
    } else {
        mscale(factor, 1.0)
    };
    attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
    attn_factor *= keys.f32_or("rope.scaling.attn_factor", 1.0)?;
    let n_ctx_train = keys.usize_or("context_length", 4096)?;
    let n_ctx_orig = keys.usize_or("rope.scaling.original_context_length", n_ctx_train)?;
    let yarn = Yarn {
        ext_factor: 1.0,
        attn_factor,
        beta_fast: keys.f32_or("rope.scaling.yarn_beta_fast", 32.0)?,
        beta_slow: keys.f32_or("rope.scaling.yarn_beta_slow", 1.0)?,
        n_ctx_orig: n_ctx_orig as u32,
    };
    let ok = |v: f32| v.is_finite() && v > 0.0;
    if n_ctx_orig == 0 || !ok(yarn.attn_factor) || !ok(yarn.beta_fast) || !ok(yarn.beta_slow) {
        return Err(Error::metadata(
            format!("{}.rope.scaling", keys.arch),
            format!("YaRN parameters {yarn:?} are not usable"),
        ));
    }
    Ok(yarn)
}

/// `attention.temperature_scale` (0 or absent: none), floored every
/// `rope.scaling.original_context_length` positions, as llama.cpp's mistral3 reads it.
pub fn read_attn_temp(keys: &Keys, hp: &HParams) -> Result<Option<AttnTemp>> {
    let scale = keys.f32_or("attention.temperature_scale", 0.0)?;
    if scale == 0.0 {
        return Ok(None);
    }
    let floor = match hp.rope.yarn {
        Some(y) => y.n_ctx_orig as usize,
        None => keys.usize_or("rope.scaling.original_context_length", hp.n_ctx_train)?,
    };
    if floor == 0 || !scale.is_finite() {
        return Err(Error::metadata(
            format!("{}.attention.temperature_scale", keys.arch),
            format!("scale {scale} over {floor} positions is not usable"),
        ));
    }
    Ok(Some(AttnTemp {
        scale,
        floor: floor as u32,
    }))
}

/// Asserts a tensor's ggml shape `[ne0, ne1, …]`.
pub fn check_shape(t: &Tensor, want: &[usize]) -> Result<()> {
    let got: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    let mut trimmed = got.clone();
    while trimmed.len() > want.len() && trimmed.last() == Some(&1) {
        trimmed.pop();
    }
    // A vector `[n]` is the matrix `[n, 1]` (qwen2moe's shared-expert gate).
    while trimmed.len() < want.len() && want[trimmed.len()] == 1 {
        trimmed.push(1);
    }
    if trimmed != want {
        return Err(Error::tensor(
            &t.name,
            format!("shape {got:?} contradicts the hyperparameters, which need {want:?}"),
        ));
    }
    Ok(())
}
