//! Which type each tensor gets: llama.cpp's `tensor_allows_quantization`,
//! `llama_tensor_get_type(_impl)` and `tensor_type_fallback` (`src/llama-quant.cpp`), for the
//! file types in [`super::FILE_TYPES`]. The branches for file types not offered here (the IQ
//! mixes, TQ, Q2_K_S) are left out; every branch kept is in ggml's order, since the first
//! matching `else if` wins.

use crate::error::{Error, Result};
use crate::quant::QType;

use super::FileType;

// `enum llama_ftype` values the mixes test.
const Q2_K: u32 = 10;
const Q3_K_S: u32 = 11;
const Q3_K_M: u32 = 12;
const Q3_K_L: u32 = 13;
const Q4_K_S: u32 = 14;
const Q4_K_M: u32 = 15;
const Q5_K_M: u32 = 17;
const IQ4_NL: u32 = 25;
const MXFP4_MOE: u32 = 38;

/// ggml's `tensor_category` (`tensor_get_category`): broad roles by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    TokenEmbd,
    AttnQ,
    AttnV,
    AttnK,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

pub fn category(name: &str) -> Category {
    use Category::*;
    if name == "output.weight" {
        return Output;
    }
    if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        return TokenEmbd;
    }
    let table = [
        ("attn_qkv.weight", AttnQkv),
        ("attn_kv_b.weight", AttnKvB),
        ("attn_v.weight", AttnV),
        ("attn_k.weight", AttnK),
        ("attn_q.weight", AttnQ),
        ("attn_output.weight", AttnOutput),
        ("ffn_up", FfnUp),
        ("ffn_gate", FfnGate),
        ("ffn_down", FfnDown),
    ];
    table.iter().find(|(s, _)| name.contains(s)).map_or(Other, |&(_, c)| c)
}

fn is_attn_v_like(c: Category) -> bool {
    matches!(c, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
}

/// `ggml_n_dims`: the number of dimensions up to the last one above 1 (at least 1).
pub fn n_dims(shape: &[u64]) -> usize {
    shape.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// ggml: `tensor_allows_quantization` (with `quantize_output_tensor` on, as llama-quantize has
/// it by default): 2-D and 3-D weights except norms, routers, position embeddings and a list
/// of small tables.
pub fn allows_quantization(arch: &str, name: &str, shape: &[u64]) -> bool {
    if n_dims(shape) < 2 || !name.ends_with("weight") {
        return false;
    }
    const NEVER: &[&str] = &[
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    const NEVER_GLM5_NEXT: &[&str] = &[
        "hc_",
        "indexer.attn_q_b",
        "indexer.attn_k",
        "indexer.proj",
        "indexer_compressor_gate",
        "indexer_compressor_ape",
        "ssm_f_a.weight",
        "ssm_f_b.weight",
        "ssm_g_a.weight",
        "ssm_g_b.weight",
        "ssm_beta.weight",
        "attn_kv_a_mqa.weight",
        "attn_k_b.weight",
        "attn_v_b.weight",
    ];
    if NEVER.iter().any(|s| name.contains(s)) {
        return false;
    }
    if arch == "glm5-next" && NEVER_GLM5_NEXT.iter().any(|s| name.contains(s)) {
        return false;
    }
    name != "position_embd.weight" && name != "token_types.weight"
}

/// What the mixes read from the model's hyperparameters (llama.cpp's `hparams`).
#[derive(Clone, Debug)]
pub struct ModelFacts {
    pub arch: String,
    /// `block_count` (`n_layer_all`).
    pub n_layer: i64,
    /// `expert_count` (0 for dense models).
    pub n_expert: i64,
    /// `n_head / n_head_kv` of layer 0 (0 when `n_head_kv` is 0).
    pub n_gqa: i64,
    /// llama.cpp's `LLM_TYPE_70B` (arch llama, 80 layers, grouped-query attention).
    pub is_70b: bool,
}

/// The per-file state of ggml's `quantize_state_impl`: counters advance as tensors are
/// visited in file order.
pub struct Mixer<'a> {
    facts: &'a ModelFacts,
    ftype: &'a FileType,
    pure: bool,
    has_tied_embeddings: bool,
    n_attention_wv: i64,
    i_attention_wv: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
}

fn use_more_bits(i: i64, n: i64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

impl<'a> Mixer<'a> {
    /// `names` is every tensor of the file (`init_quantize_state_counters`).
    pub fn new<'n>(
        facts: &'a ModelFacts,
        ftype: &'a FileType,
        pure: bool,
        names: impl Iterator<Item = &'n str>,
    ) -> Self {
        let (mut n_attention_wv, mut has_tied_embeddings) = (0, true);
        for n in names {
            let c = category(n);
            n_attention_wv += is_attn_v_like(c) as i64;
            has_tied_embeddings &= c != Category::Output;
        }
        Mixer {
            facts,
            ftype,
            pure,
            has_tied_embeddings,
            n_attention_wv,
            i_attention_wv: 0,
            i_ffn_down: 0,
            i_ffn_gate: 0,
            i_ffn_up: 0,
        }
    }

    /// The output type of one tensor (`llama_tensor_get_type`), visited in file order.
    pub fn target(&mut self, name: &str, qtype: QType, shape: &[u64]) -> Result<QType> {
        if !allows_quantization(&self.facts.arch, name, shape) {
            return Ok(qtype);
        }
        let mut t = self.ftype.default;
        if !t.is_quantized() {
            return Ok(t);
        }
        if !self.pure {
            t = self.mix(t, name, shape)?;
        }
        fallback(name, shape, t)
    }

    /// The layer of an FFN tensor and the layer count (`layer_info`): MoE models name it.
    fn layer_info(&self, counter: i64, name: &str) -> Result<(i64, i64)> {
        let n = self.facts.n_layer;
        if self.facts.n_expert.max(1) <= 1 {
            return Ok((counter, n));
        }
        let i = block_of(name).ok_or_else(|| Error::tensor(name, "failed to determine the layer"))?;
        if i < 0 || i >= n {
            return Err(Error::tensor(name, format!("bad layer {i}: must be in [0, {n})")));
        }
        Ok((i, n))
    }

    /// ggml: `llama_tensor_get_type_impl`, the `_M`/`_S`/`_L` and MXFP4_MOE mixes.
    fn mix(&mut self, mut t: QType, name: &str, shape: &[u64]) -> Result<QType> {
        use Category::*;
        let f = self.ftype.id;
        let facts = self.facts;
        let falcon = facts.arch == "falcon";
        let c = category(name);
        if c == Output || (self.has_tied_embeddings && c == TokenEmbd) {
            let nx = shape.first().copied().unwrap_or(0);
            if f == MXFP4_MOE || falcon || nx % t.block_elems() as u64 != 0 {
                t = QType::Q8_0;
            } else if t != QType::Q8_0 {
                t = QType::Q6K;
            }
        } else if f == MXFP4_MOE {
            // Experts (3-D, more than one matrix) MXFP4, every other weight Q8_0.
            let bailing = facts.arch == "bailingmoe3";
            let expert_role = matches!(c, FfnUp | FfnGate | FfnDown);
            let ne2 = shape.get(2).copied().unwrap_or(1);
            t = if ne2 > 1 && (!bailing || expert_role) {
                QType::MXFP4
            } else {
                QType::Q8_0
            };
        } else if c == TokenEmbd {
            // Only the IQ/TQ mixes change an untied token embedding.
        } else if is_attn_v_like(c) {
            let (i, n) = (self.i_attention_wv, self.n_attention_wv);
            if f == Q2_K {
                t = if facts.n_gqa >= 4 { QType::Q4K } else { QType::Q3K };
            } else if f == Q3_K_M {
                t = if i < 2 { QType::Q5K } else { QType::Q4K };
            } else if f == Q3_K_L || (f == IQ4_NL && facts.n_gqa >= 4) {
                t = QType::Q5K;
            } else if (f == Q4_K_M || f == Q5_K_M) && use_more_bits(i, n) {
                t = QType::Q6K;
            } else if f == Q4_K_S && i < 4 {
                t = QType::Q5K;
            }
            if facts.is_70b && matches!(t, QType::Q3K | QType::Q4K) {
                t = QType::Q5K;
            }
            if facts.n_expert == 8 {
                t = QType::Q8_0;
            }
            self.i_attention_wv += 1;
        } else if c == AttnK {
            if facts.n_expert == 8 {
                t = QType::Q8_0;
            }
        } else if c == FfnDown {
            let (i, n) = self.layer_info(self.i_ffn_down, name)?;
            if f == Q2_K {
                t = QType::Q3K;
            } else if f == Q3_K_M {
                t = if i < n / 16 {
                    QType::Q5K
                } else if !falcon || use_more_bits(i, n) {
                    QType::Q4K
                } else {
                    QType::Q3K
                };
            } else if f == Q3_K_L {
                t = if falcon { QType::Q4K } else { QType::Q5K };
            } else if f == Q4_K_M {
                if falcon {
                    t = if i < n / 16 {
                        QType::Q6K
                    } else if use_more_bits(i, n) {
                        QType::Q5K
                    } else {
                        QType::Q4K
                    };
                } else if use_more_bits(i, n) {
                    t = QType::Q6K;
                }
            } else if i < n / 8 && f == IQ4_NL {
                // (no imatrix here)
                t = QType::Q5K;
            } else if f == Q5_K_M && use_more_bits(i, n) {
                t = QType::Q6K;
            } else if f == Q4_K_S && !falcon && i < n / 8 {
                t = QType::Q5K;
            }
            self.i_ffn_down += 1;
        } else if c == AttnOutput {
            if !falcon {
                if facts.n_expert == 8 {
                    if matches!(f, Q2_K | Q3_K_S | Q3_K_M | IQ4_NL | Q4_K_S | Q4_K_M) {
                        t = QType::Q5K;
                    }
                } else if f == Q2_K {
                    t = QType::Q3K;
                } else if f == Q3_K_M {
                    t = QType::Q4K;
                } else if f == Q3_K_L {
                    t = QType::Q5K;
                }
            } else if f == Q3_K_L {
                t = QType::Q4K;
            }
        } else if c == AttnQkv {
            // Unreachable (attn_qkv is attn_v-like above), as in ggml.
        } else if c == FfnGate {
            self.layer_info(self.i_ffn_gate, name)?;
            self.i_ffn_gate += 1;
        } else if c == FfnUp {
            self.layer_info(self.i_ffn_up, name)?;
            self.i_ffn_up += 1;
        }
        Ok(t)
    }
}

/// ggml: `tensor_type_fallback`. A row that is not a whole number of `t`'s blocks takes a
/// 32-element type, and one that is not even that takes F16.
fn fallback(name: &str, shape: &[u64], t: QType) -> Result<QType> {
    let ncols = shape.first().copied().unwrap_or(0);
    let fits = |q: QType| ncols.is_multiple_of(q.block_elems() as u64);
    if fits(t) {
        return Ok(t);
    }
    let r = match t {
        QType::Q2K | QType::Q3K => QType::Q4_0,
        QType::Q4K => QType::Q5_0,
        QType::Q5K => QType::Q5_1,
        QType::Q6K => QType::Q8_0,
        q if q.block_elems() <= 32 => q,
        q => {
            return Err(Error::tensor(
                name,
                format!("rows of {ncols} are not {q} blocks and {q} has no fallback type"),
            ))
        }
    };
    Ok(if fits(r) { r } else { QType::F16 })
}

/// The `N` of a `blk.N.` name, as `sscanf(name, "blk.%d.", &n)` reads it.
pub fn block_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?.trim_start();
    let (sign, digits) = match rest.as_bytes().first()? {
        b'-' => (-1, &rest[1..]),
        b'+' => (1, &rest[1..]),
        _ => (1, rest),
    };
    let end = digits.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse::<i64>().ok().map(|v| sign * v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_and_exclusions_follow_ggml() {
        assert_eq!(category("blk.0.ffn_gate_exps.weight"), Category::FfnGate);
        assert_eq!(category("blk.0.attn_qkv.weight"), Category::AttnQkv);
        assert_eq!(category("per_layer_token_embd.weight"), Category::TokenEmbd);
        assert!(!allows_quantization("qwen3moe", "blk.0.ffn_gate_inp.weight", &[256, 4]));
        assert!(!allows_quantization("llama", "blk.0.attn_norm.weight", &[256]));
        assert!(!allows_quantization(
            "qwen2moe",
            "blk.0.ffn_gate_inp_shexp.weight",
            &[256, 1]
        ));
        assert!(!allows_quantization("gpt-oss", "blk.0.ffn_up_exps.bias", &[256, 4]));
        assert!(allows_quantization(
            "gpt-oss",
            "blk.0.ffn_up_exps.weight",
            &[256, 256, 4]
        ));
        assert_eq!(n_dims(&[256, 1, 1]), 1);
        assert_eq!(block_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(block_of("output.weight"), None);
    }

    #[test]
    fn fallback_takes_32_element_types_then_f16() {
        assert_eq!(fallback("t", &[64, 256], QType::Q4K).unwrap(), QType::Q5_0);
        assert_eq!(fallback("t", &[64, 256], QType::Q6K).unwrap(), QType::Q8_0);
        assert_eq!(fallback("t", &[48, 256], QType::Q4K).unwrap(), QType::F16);
        assert_eq!(fallback("t", &[48, 256], QType::Q8_0).unwrap(), QType::F16);
        assert_eq!(fallback("t", &[256, 256], QType::Q4K).unwrap(), QType::Q4K);
    }
}
