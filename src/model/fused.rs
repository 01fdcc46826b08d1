//! Fused weights split at load into zero-copy row-range views under the canonical names, so
//! every backend reads them as ordinary matrices: Phi-3's `attn_qkv` (Q, K, V stacked along
//! the output rows) and the `ffn_up` `[n_embd, 2 n_ff]` of Phi-3 and GLM-4 (gate rows, then up
//! rows; llama.cpp's `build_ffn` with `LLM_FFN_SWIGLU` and no gate splits it the same way).
//! Every output row is whole blocks of its qtype, so a row range is a byte range for every
//! qtype and nothing is copied.

use crate::error::{Error, Result};
use crate::model::hparams::{Keys, Weights};

/// Replaces the 2-D tensor `fused` `[ne0, Σ rows]` by one view per `(name, rows)` part, in
/// order of its rows. A missing tensor is left alone (the graph's check names what is
/// missing); a shape that is not exactly the parts is an error naming the tensor.
pub fn split_rows(weights: &mut Weights, fused: &str, parts: &[(String, usize)]) -> Result<()> {
    let Some(t) = weights.get(fused) else {
        return Ok(());
    };
    let want: usize = parts.iter().map(|(_, r)| r).sum();
    if t.shape.len() != 2 || t.shape[1] != want as u64 {
        let sizes: Vec<String> = parts.iter().map(|(n, r)| format!("{n} {r}")).collect();
        return Err(Error::tensor(
            fused,
            format!(
                "shape {:?}, but it must stack [{}, {want}] ({})",
                t.shape,
                t.shape.first().copied().unwrap_or(0),
                sizes.join(" + ")
            ),
        ));
    }
    if let Some((name, _)) = parts.iter().find(|(n, _)| n != fused && weights.contains_key(n)) {
        return Err(Error::tensor(
            name,
            format!("present both on its own and inside the fused '{fused}'"),
        ));
    }
    let row_bytes = t.row_bytes();
    let mut views = Vec::with_capacity(parts.len());
    let mut row = 0usize;
    for (name, rows) in parts {
        let (start, len) = (row * row_bytes, rows * row_bytes);
        let data = t.data.slice(start, len).ok_or_else(|| {
            Error::tensor(
                fused,
                format!("rows {row}..{} lie past its {} bytes", row + rows, t.data.len()),
            )
        })?;
        let mut v = t.clone();
        v.name = name.clone();
        v.shape = vec![t.shape[0], *rows as u64];
        v.data = data;
        v.file_offset = t.file_offset + start as u64;
        views.push(v);
        row += rows;
    }
    weights.remove(fused);
    for v in views {
        weights.insert(v.name.clone(), v);
    }
    Ok(())
}

/// Layer indices of every `blk.N.{suffix}` present, sorted.
fn layers_with(weights: &Weights, suffix: &str) -> Vec<usize> {
    let mut v: Vec<usize> = weights
        .keys()
        .filter_map(|k| {
            k.strip_prefix("blk.")?
                .strip_suffix(suffix)?
                .strip_suffix('.')?
                .parse()
                .ok()
        })
        .collect();
    v.sort_unstable();
    v
}

/// Splits every layer's fused `ffn_up` `[n_embd, 2 n_ff]` into `ffn_gate` (first n_ff rows)
/// and `ffn_up` (the rest).
pub fn split_gate_up(keys: &Keys, weights: &mut Weights) -> Result<()> {
    let n_ff = keys.usize("feed_forward_length")?;
    for il in layers_with(weights, "ffn_up.weight") {
        let p = format!("blk.{il}");
        let parts = [
            (format!("{p}.ffn_gate.weight"), n_ff),
            (format!("{p}.ffn_up.weight"), n_ff),
        ];
        split_rows(weights, &format!("{p}.ffn_up.weight"), &parts)?;
    }
    Ok(())
}

/// Splits every layer's fused `attn_qkv` `[n_embd, (n_head + 2 n_head_kv) head_dim]` into
/// `attn_q`, `attn_k`, `attn_v` (llama.cpp's `create_tensor_qkv` / `build_qkv`).
pub fn split_qkv(keys: &Keys, weights: &mut Weights) -> Result<()> {
    let n_embd = keys.usize("embedding_length")?;
    let n_head = keys.usize("attention.head_count")?;
    let n_head_kv = keys.usize_or("attention.head_count_kv", n_head)?;
    if n_head == 0 {
        return Err(Error::metadata(format!("{}.attention.head_count", keys.arch), "is 0"));
    }
    let head_dim = keys.usize_or("attention.key_length", n_embd / n_head)?;
    let head_dim_v = keys.usize_or("attention.value_length", head_dim)?;
    for il in layers_with(weights, "attn_qkv.weight") {
        let p = format!("blk.{il}");
        let parts = [
            (format!("{p}.attn_q.weight"), n_head * head_dim),
            (format!("{p}.attn_k.weight"), n_head_kv * head_dim),
            (format!("{p}.attn_v.weight"), n_head_kv * head_dim_v),
        ];
        split_rows(weights, &format!("{p}.attn_qkv.weight"), &parts)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::QType;
    use crate::tensor::{Bytes, Tensor};

    fn q8(name: &str, ne0: u64, rows: u64) -> Tensor {
        let n = (ne0 / 32 * 34 * rows) as usize;
        Tensor {
            name: name.into(),
            qtype: QType::Q8_0,
            shape: vec![ne0, rows],
            data: Bytes::from_vec((0..n).map(|i| i as u8).collect()),
            part: 0,
            file_offset: 100,
        }
    }

    #[test]
    fn splits_rows_into_views_of_the_same_bytes() {
        let mut w = Weights::new();
        let t = q8("f", 64, 5);
        let all = t.bytes().to_vec();
        w.insert("f".into(), t);
        split_rows(&mut w, "f", &[("a".into(), 2), ("b".into(), 3)]).unwrap();
        assert!(!w.contains_key("f"));
        let (a, b) = (&w["a"], &w["b"]);
        assert_eq!((a.shape.clone(), b.shape.clone()), (vec![64, 2], vec![64, 3]));
        assert_eq!(a.bytes(), &all[..2 * 68]);
        assert_eq!(b.bytes(), &all[2 * 68..]);
        assert_eq!((a.file_offset, b.file_offset), (100, 100 + 2 * 68));
    }

    #[test]
    fn a_fused_tensor_of_the_wrong_size_is_named() {
        let mut w = Weights::new();
        w.insert("blk.0.attn_qkv.weight".into(), q8("blk.0.attn_qkv.weight", 64, 5));
        let e = split_rows(&mut w, "blk.0.attn_qkv.weight", &[("a".into(), 2), ("b".into(), 2)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("blk.0.attn_qkv.weight") && e.contains("[64, 4]"), "{e}");
        // Nothing changed.
        assert!(w.contains_key("blk.0.attn_qkv.weight") && !w.contains_key("a"));
        assert!(split_rows(&mut w, "absent", &[("a".into(), 1)]).is_ok());
    }
}
