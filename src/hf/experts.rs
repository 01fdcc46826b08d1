//! Mixture-of-experts checkpoint tensors → the GGUF expert tensors the graph reads:
//! `blk.N.ffn_{gate,up}_exps.weight` [n_embd, n_ff_exp, n_expert] and `ffn_down_exps.weight`
//! [n_ff_exp, n_embd, n_expert] (ggml order; one 2-D matrix per expert, experts contiguous).
//!
//! Checkpoints store experts three ways:
//! - one tensor per expert (`mlp.experts.E.{gate,up,down}_proj.weight`, Mixtral's
//!   `block_sparse_moe.experts.E.{w1,w3,w2}.weight`), [out, in] each: stacked, one copy at load
//!   (the experts are separate tensors in the file, so no view can make them one);
//! - fused (transformers 5 `Qwen3MoeExperts` / `MixtralExperts`): `mlp.experts.gate_up_proj`
//!   [E, 2·ff, hidden] (gate = rows 0..ff, up = ff..2·ff) and `down_proj` [E, hidden, ff]: down is
//!   already the GGUF layout (a view); gate and up are copied out of the interleaved experts;
//! - gpt-oss (`GptOssExperts`): `gate_up_proj` [E, hidden, 2·ff] used as `x @ W` with gate =
//!   columns 0, 2, 4, … and up = 1, 3, 5, …, `down_proj` [E, ff, hidden], biases
//!   `{gate_up,down}_proj_bias` [E, 2·ff] / [E, hidden]: transposed and de-interleaved (a copy);
//!   or MXFP4 `*_blocks` U8 [E, out, in/32, 16] + `*_scales` U8 [E, out, in/32], repacked
//!   nibble by nibble into ggml `block_mxfp4` rows (never expanded to floats).

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::model::Arch;
use crate::quant::QType;
use crate::tensor::{Bytes, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Proj {
    Gate,
    Up,
    Down,
    /// gate and up fused in one tensor.
    GateUp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Weight,
    Bias,
    /// MXFP4 codes, U8.
    Blocks,
    /// MXFP4 E8M0 scales, U8.
    Scales,
}

/// Where one expert tensor of the checkpoint belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExpertName {
    pub layer: usize,
    pub proj: Proj,
    pub part: Part,
    /// `None` for a tensor holding every expert.
    pub expert: Option<usize>,
}

fn index(s: &str) -> Option<usize> {
    let ok =
        !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit()) && !(s.len() > 1 && s.starts_with('0'));
    ok.then(|| s.parse().ok()).flatten()
}

/// Parses an expert tensor name of an MoE architecture's checkpoint (after the `model.` wrapper).
pub fn parse(arch: Arch, name: &str) -> Option<ExpertName> {
    if !matches!(arch, Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::Llama | Arch::GptOss) {
        return None;
    }
    let rest = name.strip_prefix("model.layers.")?;
    let (n, tail) = rest.split_once('.')?;
    let layer = index(n)?;
    let (expert, tail) = if let Some(t) = tail.strip_prefix("mlp.experts.") {
        match t.split_once('.') {
            Some((e, t)) if index(e).is_some() => (index(e), t),
            _ => (None, t),
        }
    } else if let Some(t) = tail.strip_prefix("block_sparse_moe.experts.") {
        let (e, t) = t.split_once('.')?;
        (Some(index(e)?), t)
    } else {
        return None;
    };
    let (proj, part) = match (expert, arch, tail) {
        (Some(_), Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::Llama, "gate_proj.weight") => (Proj::Gate, Part::Weight),
        (Some(_), Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::Llama, "up_proj.weight") => (Proj::Up, Part::Weight),
        (Some(_), Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::Llama, "down_proj.weight") => (Proj::Down, Part::Weight),
        (Some(_), Arch::Llama, "w1.weight") => (Proj::Gate, Part::Weight),
        (Some(_), Arch::Llama, "w3.weight") => (Proj::Up, Part::Weight),
        (Some(_), Arch::Llama, "w2.weight") => (Proj::Down, Part::Weight),
        (None, _, "gate_up_proj") => (Proj::GateUp, Part::Weight),
        (None, _, "down_proj") => (Proj::Down, Part::Weight),
        (None, Arch::GptOss, "gate_up_proj_bias") => (Proj::GateUp, Part::Bias),
        (None, Arch::GptOss, "down_proj_bias") => (Proj::Down, Part::Bias),
        (None, Arch::GptOss, "gate_up_proj_blocks") => (Proj::GateUp, Part::Blocks),
        (None, Arch::GptOss, "down_proj_blocks") => (Proj::Down, Part::Blocks),
        (None, Arch::GptOss, "gate_up_proj_scales") => (Proj::GateUp, Part::Scales),
        (None, Arch::GptOss, "down_proj_scales") => (Proj::Down, Part::Scales),
        _ => return None,
    };
    Some(ExpertName {
        layer,
        proj,
        part,
        expert,
    })
}

/// One checkpoint tensor headed for an expert tensor: its name, qtype (`None`: U8), shape (ggml
/// order) and bytes.
pub struct Piece {
    pub hf_name: String,
    pub qtype: Option<QType>,
    pub shape: Vec<u64>,
    pub data: Bytes,
}

/// An assembled tensor and the checkpoint tensor(s) it came from.
pub struct Built {
    pub tensor: Tensor,
    pub hf_name: String,
}

fn bad(name: &str, what: impl Into<String>) -> Error {
    Error::tensor(name, what)
}

fn tensor(name: String, qtype: QType, shape: Vec<u64>, data: Bytes) -> Tensor {
    Tensor {
        name,
        qtype,
        shape,
        data,
        part: 0,
        file_offset: 0,
    }
}

fn float(p: &Piece) -> Result<QType> {
    match p.qtype {
        Some(q @ (QType::F32 | QType::F16 | QType::BF16)) => Ok(q),
        Some(q) => Err(bad(&p.hf_name, format!("is {q}, not a float type"))),
        None => Err(bad(&p.hf_name, "is U8; only MXFP4 *_blocks / *_scales are")),
    }
}

fn dims<const N: usize>(p: &Piece, what: &str) -> Result<[usize; N]> {
    let ok = p.shape.len() == N && p.shape.iter().all(|&d| d > 0 && d <= 1 << 24);
    let v: Vec<usize> = p.shape.iter().map(|&d| d as usize).collect();
    match (ok, <[usize; N]>::try_from(v)) {
        (true, Ok(a)) => Ok(a),
        _ => Err(bad(
            &p.hf_name,
            format!("has shape {:?} (ggml order), expected {what}", p.shape),
        )),
    }
}

/// The canonical tensors of every expert piece; `n_expert` from the config.
pub fn assemble(arch: Arch, n_expert: usize, pieces: Vec<(ExpertName, Piece)>) -> Result<Vec<Built>> {
    // (layer, proj, part) → experts (None = fused) → piece
    let mut groups: BTreeMap<(usize, Proj, Part), BTreeMap<Option<usize>, Piece>> = BTreeMap::new();
    for (n, p) in pieces {
        if n.expert.is_some_and(|e| e >= n_expert) {
            return Err(bad(
                &p.hf_name,
                format!("expert {} of a model with {n_expert} experts", n.expert.unwrap_or(0)),
            ));
        }
        let g = groups.entry((n.layer, n.proj, n.part)).or_default();
        if let Some((_, other)) = g.iter().find(|(k, _)| k.is_none() != n.expert.is_none()) {
            return Err(bad(
                &p.hf_name,
                format!("beside '{}': experts both fused and one per tensor", other.hf_name),
            ));
        }
        g.insert(n.expert, p);
    }
    let mut out = Vec::new();
    let mut mxfp4: BTreeMap<(usize, Proj), (Option<Piece>, Option<Piece>)> = BTreeMap::new();
    for ((layer, proj, part), mut g) in groups {
        let blk = format!("blk.{layer}");
        match part {
            Part::Blocks | Part::Scales => {
                let e = mxfp4.entry((layer, proj)).or_default();
                let p = g.remove(&None);
                if part == Part::Blocks {
                    e.0 = p
                } else {
                    e.1 = p
                }
            }
            _ if g.contains_key(&None) => {
                let p = g.remove(&None).ok_or_else(|| Error::MissingTensor(blk.clone()))?;
                out.extend(fused(arch, &blk, proj, part, p)?);
            }
            _ => out.push(stack(&blk, proj, n_expert, g)?),
        }
    }
    for ((layer, proj), pair) in mxfp4 {
        match pair {
            (Some(b), Some(s)) => out.extend(mxfp4_experts(&format!("blk.{layer}"), proj, &b, &s)?),
            (Some(p), None) | (None, Some(p)) => {
                let other = if p.hf_name.ends_with("_blocks") {
                    "_scales"
                } else {
                    "_blocks"
                };
                return Err(bad(&p.hf_name, format!("has no {other} beside it")));
            }
            (None, None) => {}
        }
    }
    Ok(out)
}

fn canonical(blk: &str, proj: Proj, part: Part) -> String {
    let p = match proj {
        Proj::Gate => "gate",
        Proj::Up => "up",
        Proj::Down | Proj::GateUp => "down",
    };
    let k = if part == Part::Bias { "bias" } else { "weight" };
    format!("{blk}.ffn_{p}_exps.{k}")
}

/// Per-expert [in, out] matrices, experts 0..n_expert all present and alike, stacked to
/// [in, out, n_expert].
fn stack(blk: &str, proj: Proj, n_expert: usize, g: BTreeMap<Option<usize>, Piece>) -> Result<Built> {
    let first = g.values().next().ok_or_else(|| Error::MissingTensor(blk.to_string()))?;
    let qtype = float(first)?;
    let [cols, rows] = dims::<2>(first, "[in, out]")?;
    let mut bytes = Vec::with_capacity(first.data.len() * n_expert);
    for e in 0..n_expert {
        let Some(p) = g.get(&Some(e)) else {
            let missing =
                first
                    .hf_name
                    .replacen(&format!(".experts.{}.", first_expert(&g)), &format!(".experts.{e}."), 1);
            return Err(bad(
                &missing,
                format!(
                    "missing: the config says {n_expert} experts ('{}' is there)",
                    first.hf_name
                ),
            ));
        };
        if p.qtype != Some(qtype) || p.shape != first.shape {
            return Err(bad(
                &p.hf_name,
                format!(
                    "is {:?} {:?}, but '{}' is {qtype} {:?}: experts must be alike",
                    p.qtype.map(|q| q.name()).unwrap_or("u8"),
                    p.shape,
                    first.hf_name,
                    first.shape
                ),
            ));
        }
        bytes.extend_from_slice(&p.data);
    }
    let shape = vec![cols as u64, rows as u64, n_expert as u64];
    let hf_name = first
        .hf_name
        .replacen(&format!(".experts.{}.", first_expert(&g)), ".experts.*.", 1);
    Ok(Built {
        tensor: tensor(canonical(blk, proj, Part::Weight), qtype, shape, Bytes::from_vec(bytes)),
        hf_name,
    })
}

fn first_expert(g: &BTreeMap<Option<usize>, Piece>) -> usize {
    g.keys().next().copied().flatten().unwrap_or(0)
}

/// Fused float tensors holding every expert.
fn fused(arch: Arch, blk: &str, proj: Proj, part: Part, p: Piece) -> Result<Vec<Built>> {
    let qtype = float(&p)?;
    let es = qtype.block_bytes();
    let built = |proj, shape: Vec<u64>, data| Built {
        tensor: tensor(canonical(blk, proj, part), qtype, shape, data),
        hf_name: p.hf_name.clone(),
    };
    match (arch, proj, part) {
        (Arch::GptOss, Proj::GateUp, Part::Weight) => {
            // torch [E, hidden, 2ff] = ggml [2ff, hidden, E]: gate[e][o][i] = W[e][i][2o].
            let [ff2, hidden, ne] = dims::<3>(&p, "[2·ff, hidden, experts]")?;
            if ff2 % 2 != 0 {
                return Err(bad(
                    &p.hf_name,
                    format!("has {ff2} gate/up columns, not an even number"),
                ));
            }
            let ff = ff2 / 2;
            let mut gate = Vec::with_capacity(p.data.len() / 2);
            let mut up = Vec::with_capacity(p.data.len() / 2);
            for e in 0..ne {
                for o in 0..ff {
                    for i in 0..hidden {
                        let at = ((e * hidden + i) * ff2 + 2 * o) * es;
                        gate.extend_from_slice(&p.data[at..at + es]);
                        up.extend_from_slice(&p.data[at + es..at + 2 * es]);
                    }
                }
            }
            let shape = vec![hidden as u64, ff as u64, ne as u64];
            Ok(vec![
                built(Proj::Gate, shape.clone(), Bytes::from_vec(gate)),
                built(Proj::Up, shape, Bytes::from_vec(up)),
            ])
        }
        (Arch::GptOss, Proj::Down, Part::Weight) => {
            // torch [E, ff, hidden] = ggml [hidden, ff, E] → [ff, hidden, E].
            let [hidden, ff, ne] = dims::<3>(&p, "[hidden, ff, experts]")?;
            let mut t = Vec::with_capacity(p.data.len());
            for e in 0..ne {
                for o in 0..hidden {
                    for i in 0..ff {
                        let at = ((e * ff + i) * hidden + o) * es;
                        t.extend_from_slice(&p.data[at..at + es]);
                    }
                }
            }
            Ok(vec![built(
                Proj::Down,
                vec![ff as u64, hidden as u64, ne as u64],
                Bytes::from_vec(t),
            )])
        }
        (Arch::GptOss, Proj::GateUp, Part::Bias) => {
            // [E, 2ff] interleaved → gate, up [ff, E].
            let [ff2, ne] = dims::<2>(&p, "[2·ff, experts]")?;
            if ff2 % 2 != 0 {
                return Err(bad(&p.hf_name, format!("has {ff2} gate/up biases, not an even number")));
            }
            let (mut gate, mut up) = (Vec::new(), Vec::new());
            for pair in p.data.chunks_exact(2 * es) {
                gate.extend_from_slice(&pair[..es]);
                up.extend_from_slice(&pair[es..]);
            }
            let shape = vec![ff2 as u64 / 2, ne as u64];
            Ok(vec![
                built(Proj::Gate, shape.clone(), Bytes::from_vec(gate)),
                built(Proj::Up, shape, Bytes::from_vec(up)),
            ])
        }
        (Arch::GptOss, Proj::Down, Part::Bias) => {
            let [hidden, ne] = dims::<2>(&p, "[hidden, experts]")?;
            Ok(vec![built(Proj::Down, vec![hidden as u64, ne as u64], p.data.clone())])
        }
        (_, Proj::GateUp, Part::Weight) => {
            // torch [E, 2ff, hidden] = ggml [hidden, 2ff, E]: per expert, gate rows then up rows.
            let [hidden, ff2, ne] = dims::<3>(&p, "[hidden, 2·ff, experts]")?;
            if ff2 % 2 != 0 {
                return Err(bad(&p.hf_name, format!("has {ff2} gate/up rows, not an even number")));
            }
            let half = ff2 / 2 * hidden * es;
            let (mut gate, mut up) = (Vec::new(), Vec::new());
            for e in p.data.chunks_exact(2 * half) {
                gate.extend_from_slice(&e[..half]);
                up.extend_from_slice(&e[half..]);
            }
            let shape = vec![hidden as u64, ff2 as u64 / 2, ne as u64];
            Ok(vec![
                built(Proj::Gate, shape.clone(), Bytes::from_vec(gate)),
                built(Proj::Up, shape, Bytes::from_vec(up)),
            ])
        }
        (_, Proj::Down, Part::Weight) => {
            // torch [E, hidden, ff] = ggml [ff, hidden, E]: already the GGUF layout.
            dims::<3>(&p, "[ff, hidden, experts]")?;
            Ok(vec![built(Proj::Down, p.shape.clone(), p.data.clone())])
        }
        _ => Err(bad(&p.hf_name, "is not an expert tensor this architecture has")),
    }
}

/// One HF MXFP4 block (16 bytes, byte j = element 2j low | 2j+1 high) as ggml's `qs[16]`
/// (byte j = element j low | j+16 high): `convert_hf_to_gguf.py`'s `repack_mxfp4`.
pub fn repack_mxfp4(hf: &[u8; 16]) -> [u8; 16] {
    let mut codes = [0u8; 32];
    for (j, b) in hf.iter().enumerate() {
        codes[2 * j] = b & 0x0f;
        codes[2 * j + 1] = b >> 4;
    }
    std::array::from_fn(|j| codes[j] | (codes[j + 16] << 4))
}

/// gpt-oss MXFP4 experts: blocks U8 ggml [16, in/32, out, E], scales [in/32, out, E] → ggml
/// `block_mxfp4` (e, qs[16]) rows [in, out, E]; gate_up's rows de-interleaved (gate = even).
fn mxfp4_experts(blk: &str, proj: Proj, blocks: &Piece, scales: &Piece) -> Result<Vec<Built>> {
    for p in [blocks, scales] {
        if let Some(q) = p.qtype {
            return Err(bad(&p.hf_name, format!("is {q}; MXFP4 blocks and scales are U8")));
        }
    }
    let [b16, nb, rows, ne] = dims::<4>(blocks, "[16, in/32, out, experts]")?;
    if b16 != 16 {
        return Err(bad(&blocks.hf_name, format!("has {b16} bytes per block, not 16")));
    }
    if scales.shape != blocks.shape[1..] {
        return Err(bad(
            &scales.hf_name,
            format!(
                "has shape {:?}, but '{}' needs {:?}",
                scales.shape,
                blocks.hf_name,
                &blocks.shape[1..]
            ),
        ));
    }
    let row = |e: usize, r: usize, out: &mut Vec<u8>| {
        for g in 0..nb {
            let at = (e * rows + r) * nb + g;
            out.push(scales.data[at]);
            let hf: &[u8; 16] = blocks.data[at * 16..at * 16 + 16].try_into().unwrap_or(&[0; 16]);
            out.extend_from_slice(&repack_mxfp4(hf));
        }
    };
    let n_in = (nb * 32) as u64;
    let hf_name = blocks.hf_name.trim_end_matches("_blocks").to_string() + "_{blocks,scales}";
    let built = |proj, n_rows: usize, data: Vec<u8>| Built {
        tensor: tensor(
            canonical(blk, proj, Part::Weight),
            QType::MXFP4,
            vec![n_in, n_rows as u64, ne as u64],
            Bytes::from_vec(data),
        ),
        hf_name: hf_name.clone(),
    };
    if proj == Proj::GateUp {
        if rows % 2 != 0 {
            return Err(bad(
                &blocks.hf_name,
                format!("has {rows} gate/up rows, not an even number"),
            ));
        }
        let (mut gate, mut up) = (Vec::new(), Vec::new());
        for e in 0..ne {
            for r in 0..rows / 2 {
                row(e, 2 * r, &mut gate);
                row(e, 2 * r + 1, &mut up);
            }
        }
        Ok(vec![built(Proj::Gate, rows / 2, gate), built(Proj::Up, rows / 2, up)])
    } else {
        let mut down = Vec::new();
        for e in 0..ne {
            for r in 0..rows {
                row(e, r, &mut down);
            }
        }
        Ok(vec![built(Proj::Down, rows, down)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_expert_names() {
        let n = |a, s: &str| parse(a, s);
        assert_eq!(
            n(Arch::Qwen3Moe, "model.layers.1.mlp.experts.3.up_proj.weight"),
            Some(ExpertName {
                layer: 1,
                proj: Proj::Up,
                part: Part::Weight,
                expert: Some(3)
            })
        );
        assert_eq!(
            n(Arch::Llama, "model.layers.0.block_sparse_moe.experts.2.w2.weight"),
            Some(ExpertName {
                layer: 0,
                proj: Proj::Down,
                part: Part::Weight,
                expert: Some(2)
            })
        );
        assert_eq!(
            n(Arch::GptOss, "model.layers.0.mlp.experts.gate_up_proj_scales"),
            Some(ExpertName {
                layer: 0,
                proj: Proj::GateUp,
                part: Part::Scales,
                expert: None
            })
        );
        assert_eq!(n(Arch::Qwen3, "model.layers.1.mlp.experts.3.up_proj.weight"), None);
        assert_eq!(n(Arch::Qwen3Moe, "model.layers.1.mlp.experts.03.up_proj.weight"), None);
        assert_eq!(
            n(Arch::Qwen3Moe, "model.layers.1.mlp.experts.gate_up_proj_blocks"),
            None
        );
        assert_eq!(n(Arch::Llama, "model.layers.1.mlp.up_proj.weight"), None);
    }

    /// One expert, two gate_up rows of one block: gate = row 0, up = row 1, each a 17-byte
    /// ggml block (scale, then the repacked codes); scales without U8 blocks are refused.
    #[test]
    fn mxfp4_gate_up_rows_are_split_into_ggml_blocks() {
        let piece = |name: &str, qtype, shape: Vec<u64>, data: Vec<u8>| Piece {
            hf_name: name.into(),
            qtype,
            shape,
            data: Bytes::from_vec(data),
        };
        let blocks: Vec<u8> = (0..32u8).collect();
        let b = piece("x.gate_up_proj_blocks", None, vec![16, 1, 2, 1], blocks.clone());
        let s = piece("x.gate_up_proj_scales", None, vec![1, 2, 1], vec![120, 130]);
        let out = mxfp4_experts("blk.0", Proj::GateUp, &b, &s).unwrap();
        let names: Vec<&str> = out.iter().map(|b| b.tensor.name.as_str()).collect();
        assert_eq!(names, ["blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight"]);
        for (k, built) in out.iter().enumerate() {
            let t = &built.tensor;
            assert_eq!((t.qtype, t.shape.clone()), (QType::MXFP4, vec![32, 1, 1]));
            let hf: [u8; 16] = blocks[16 * k..16 * k + 16].try_into().unwrap();
            assert_eq!(t.data[0], [120, 130][k]);
            assert_eq!(&t.data[1..], &repack_mxfp4(&hf));
        }
        let f = piece("x.gate_up_proj_scales", Some(QType::F32), vec![1, 2, 1], vec![0; 8]);
        assert!(mxfp4_experts("blk.0", Proj::GateUp, &b, &f).is_err());
    }

    /// HF byte j holds elements 2j, 2j+1; ggml byte j holds elements j, j+16.
    #[test]
    fn repacks_mxfp4_nibbles() {
        let codes: [u8; 32] = std::array::from_fn(|k| (k as u8 * 7 + 3) & 15);
        let hf: [u8; 16] = std::array::from_fn(|j| codes[2 * j] | codes[2 * j + 1] << 4);
        let g = repack_mxfp4(&hf);
        for j in 0..16 {
            assert_eq!((g[j] & 15, g[j] >> 4), (codes[j], codes[j + 16]), "{j}");
        }
    }
}
