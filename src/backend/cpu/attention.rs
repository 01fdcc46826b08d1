//! The KV cache and attention on the CPU.
//!
//! Layout per layer: K `(n_cells, n_head_kv * head_dim)` and V `(n_cells, n_head_kv * head_dim_v)`,
//! one row per cell of the session's pool, stored as f32, f16 or q8_0 rows. A token reads its
//! own sequence's cells through the step's cell list, in position order.
//! Numerics follow llama.cpp's non-flash path bit for bit with an f32 or f16 cache (see
//! [`super::ggml_order`]): q rounded to the cache's type, KQ and P·V in the lane
//! order of tinyBLAS (a batch) or `ggml_vec_dot_f16` (one token), `ggml_v_expf` softmax with
//! chunked f64 sums, and with an f16 cache the probabilities rounded to f16 before they weight
//! V. A q8_0 cache takes the plain f32 path. Flash attention (`--flash-attn`) follows ggml's
//! tiled kernel for batches of 64 tokens or more and its one-chunk kernel below that; an
//! encoder's (not causal, no window) instead runs [`super::encoder_attn`], which reads every
//! sequence whole and does not keep ggml's order.

use std::cell::RefCell;

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use super::dot::Isa;
use super::encoder_attn::{self, pack_keys, Cells, QB};
use super::ggml_order::{self, Kind, Order};
use super::ops::{axpy, dot_f32, softmax};
use super::pool::{Pool, SyncPtr};
use crate::backend::{KvLayout, KvType, Step};
use crate::error::{Error, Result};
use crate::quant::QType;

pub struct KvCache {
    pub kv_type: KvType,
    pub n_cells: usize,
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
    k_width: Vec<usize>,
    v_width: Vec<usize>,
}

/// The attention node's heads and numerics (the graph's own struct).
pub type AttnParams = crate::model::Attn;

fn row_bytes(t: KvType, width: usize) -> usize {
    t.row_bytes(width)
}

impl KvCache {
    /// Every layer `l.k_width` / `l.v_width` wide.
    pub fn new(l: &KvLayout) -> KvCache {
        KvCache::with_widths(l, vec![l.k_width; l.n_layer], vec![l.v_width; l.n_layer])
    }

    /// Each layer sized by its own K/V widths (`HParams::kv_widths`: none for a layer that
    /// reads another's cache); the layout checked the widest against the cache type and size.
    pub fn for_model(l: &KvLayout, hp: &crate::model::HParams) -> KvCache {
        let (k_width, v_width) = (0..l.n_layer).map(|il| hp.kv_widths(il)).unzip();
        KvCache::with_widths(l, k_width, v_width)
    }

    fn with_widths(l: &KvLayout, k_width: Vec<usize>, v_width: Vec<usize>) -> KvCache {
        KvCache {
            kv_type: l.kv,
            n_cells: l.n_cells,
            k: k_width
                .iter()
                .map(|&w| vec![0u8; l.n_cells * row_bytes(l.kv, w)])
                .collect(),
            v: v_width
                .iter()
                .map(|&w| vec![0u8; l.n_cells * row_bytes(l.kv, w)])
                .collect(),
            k_width,
            v_width,
        }
    }

    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(Vec::len).sum()
    }

    /// Grows every layer to `n_cells` cells, keeping what they hold.
    pub fn grow(&mut self, n_cells: usize) {
        if n_cells <= self.n_cells {
            return;
        }
        for (k, &w) in self.k.iter_mut().zip(&self.k_width) {
            k.resize(n_cells * row_bytes(self.kv_type, w), 0);
        }
        for (v, &w) in self.v.iter_mut().zip(&self.v_width) {
            v.resize(n_cells * row_bytes(self.kv_type, w), 0);
        }
        self.n_cells = n_cells;
    }

    fn store(t: KvType, src: &[f32], dst: &mut [u8]) {
        match t {
            KvType::F32 => dst.copy_from_slice(bytemuck::cast_slice(src)),
            KvType::F16 => {
                for (d, &s) in dst.chunks_exact_mut(2).zip(src) {
                    d.copy_from_slice(&f16::from_f32(s).to_le_bytes());
                }
            }
            KvType::Q8_0 => {
                // Widths were checked to be whole blocks at construction.
                let _ = QType::Q8_0.quantize(src, dst);
            }
        }
    }

    /// Decodes `cols` values of row `pos` starting at element `col0` (block-aligned for q8_0).
    fn load(t: KvType, row: &[u8], col0: usize, out: &mut [f32]) {
        match t {
            KvType::F32 => {
                for (o, c) in out.iter_mut().zip(row[col0 * 4..].chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            KvType::F16 => {
                let bytes = &row[col0 * 2..col0 * 2 + out.len() * 2];
                match bytemuck::try_cast_slice::<u8, u16>(bytes) {
                    // The cache rows are 2-aligned in practice: one vectorised conversion.
                    Ok(bits) => bits.reinterpret_cast::<f16>().convert_to_f32_slice(out),
                    Err(_) => {
                        for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                            *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
                        }
                    }
                }
            }
            KvType::Q8_0 => {
                let bb = QType::Q8_0.block_bytes();
                let start = col0 / 32 * bb;
                let n = out.len() / 32 * bb;
                let _ = QType::Q8_0.dequantize(&row[start..start + n], out);
            }
        }
    }
}

/// Per-thread scratch: K and V rows decoded to f32, one query head, its scores, and the lane
/// accumulators of `ggml_order`.
#[derive(Default)]
struct Scratch {
    k: Vec<f32>,
    v: Vec<f32>,
    q: Vec<f32>,
    scores: Vec<f32>,
    lanes: Vec<f32>,
    /// The task's keys transposed by tiles, for the tiled flash kernel.
    keys_t: Vec<f32>,
    encoder: encoder_attn::Scratch,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Writes the step's K/V into layer `p.layer` at each token's cell, then attends each token
/// over its own sequence's cells.
/// q: (n, n_head*head_dim), k: (n, n_head_kv*head_dim), v: (n, n_head_kv*head_dim_v),
/// out: (n, n_head*head_dim_v); sinks: (n_head) extra logits, one per head, with no value.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    pool: &Pool,
    kernels: &Isa,
    kv: &mut KvCache,
    p: &AttnParams,
    sinks: Option<&[f32]>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    step: &Step,
    out: &mut [f32],
) -> Result<()> {
    let l = p.layer;
    let n = step.len();
    if let Some(sk) = sinks {
        if sk.len() != p.n_head {
            return Err(Error::InvalidArgument(format!(
                "layer {l}: {} attention sinks for {} heads",
                sk.len(),
                p.n_head
            )));
        }
    }
    let cell = |t: usize, j: usize| step.cells[step.off[t] as usize + j] as usize;
    for t in 0..n {
        let c = cell(t, step.pos[t] as usize);
        if c >= kv.n_cells {
            return Err(Error::ContextOverflow {
                pos: c,
                n_ctx: kv.n_cells,
            });
        }
    }
    // A KV-shared layer reads the cache of `kv_from` (written earlier in this forward) and
    // writes none.
    let src = p.kv_from.unwrap_or(l);
    let (kw, vw) = match (kv.k_width.get(src), kv.v_width.get(src)) {
        (Some(&kw), Some(&vw)) if kw == p.n_head_kv * p.head_dim && vw == p.n_head_kv * p.head_dim_v => (kw, vw),
        _ => {
            return Err(Error::InvalidArgument(format!(
                "layer {l}: no K/V cache of layer {src} with {} heads of {}/{}",
                p.n_head_kv, p.head_dim, p.head_dim_v
            )))
        }
    };
    let t = kv.kv_type;
    let (krb, vrb) = (row_bytes(t, kw), row_bytes(t, vw));
    if p.kv_from.is_none() {
        for i in 0..n {
            let c = cell(i, step.pos[i] as usize);
            KvCache::store(t, &k[i * kw..(i + 1) * kw], &mut kv.k[l][c * krb..(c + 1) * krb]);
            KvCache::store(t, &v[i * vw..(i + 1) * vw], &mut kv.v[l][c * vrb..(c + 1) * vrb]);
        }
    }
    let l = src;

    let (kc, vc) = (&kv.k[l], &kv.v[l]);
    let group = p.n_head / p.n_head_kv;
    let (hd, hdv) = (p.head_dim, p.head_dim_v);
    let qw = p.n_head * hd;
    let ow = p.n_head * hdv;
    // Chunks: runs of consecutive tokens of one sequence at consecutive positions, cut into
    // pieces when long; each task (kv head, chunk) decodes its K/V slice once for all its q
    // heads and tokens. Causal pieces of 16 (a piece reads the keys up to its last token);
    // an encoder's of 128 (without flash attention: with it, [`encoder`] runs), since every
    // piece reads all of its input's keys: all-MiniLM-L6-v2 at 512 tokens spent 105 µs a
    // token in attention with pieces of 16, ~70–80 with 128.
    let mut chunks: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && step.off[j] == step.off[i] && step.pos[j] == step.pos[j - 1] + 1 {
            j += 1;
        }
        let len = j - i;
        let piece = match (len >= 32, p.causal) {
            (false, _) => len,
            (true, true) => 16,
            (true, false) => 128,
        };
        for s0 in (i..j).step_by(piece) {
            chunks.push((s0, (s0 + piece).min(j)));
        }
        i = j;
    }
    // The last position each token attends: its own (causal), else its run's last, the
    // run being the whole sequence from position 0 (an encoder's step).
    let mut last: Vec<usize> = step.pos.iter().map(|&p| p as usize).collect();
    if !p.causal {
        let mut runs = Vec::new();
        let mut i = 0;
        while i < n {
            let mut j = i + 1;
            while j < n && step.off[j] == step.off[i] && step.pos[j] == step.pos[j - 1] + 1 {
                j += 1;
            }
            if step.pos[i] != 0 || j - i != step.run[i] as usize {
                return Err(Error::InvalidArgument(format!(
                    "layer {l}: non-causal attention takes each sequence whole from position 0 (token {i} at {})",
                    step.pos[i]
                )));
            }
            last[i..j].fill(step.pos[j - 1] as usize);
            runs.push((i, j));
            i = j;
        }
        if p.flash && p.window.is_none() {
            let simd = encoder_attn::Simd::for_isa(kernels.isa(), hdv);
            let kv = EncoderKv {
                t,
                k: (kc, krb, kw),
                v: (vc, vrb, vw),
            };
            encoder(pool, simd, &kv, p, sinks, (q, step, &runs), out);
            return Ok(());
        }
    }
    let n_chunks = chunks.len();
    let outp = SyncPtr::new(out);
    pool.for_chunks(p.n_head_kv * n_chunks, 1, |_, r| {
        for task in r {
            let (g, c) = (task / n_chunks, task % n_chunks);
            let (t0, t1) = chunks[c];
            let pos_first = step.pos[t0] as usize;
            let hi = last[t1 - 1] + 1; // exclusive
            let lo = p.window.map_or(0, |w| (pos_first + 1).saturating_sub(w));
            SCRATCH.with(|s| {
                let Scratch {
                    k: ks,
                    v: vs,
                    q: qs,
                    scores: sc,
                    lanes,
                    keys_t: kt,
                    ..
                } = &mut *s.borrow_mut();
                qs.resize(hd, 0.0);
                // One token's one-chunk flash kernel over an f32 cache whose cells lie in
                // order (a lone sequence's usual case) reads K and V in place.
                let one_chunk = p.flash && t1 - t0 == 1 && (step.run[t0] as usize) < ggml_order::FLASH_TILED_MIN_TOKENS;
                let in_place = if one_chunk && t == KvType::F32 {
                    f32_rows_in_place((kc, krb), (vc, vrb), |j| cell(t0, j), lo..hi)
                } else {
                    None
                };
                // The cells decoded into scratch: all of them, or none when read in place.
                let copied = if in_place.is_some() { 0 } else { hi - lo };
                ks.resize(copied * hd, 0.0);
                vs.resize(copied * hdv, 0.0);
                for j in lo..lo + copied {
                    let cj = cell(t0, j);
                    KvCache::load(
                        t,
                        &kc[cj * krb..(cj + 1) * krb],
                        g * hd,
                        &mut ks[(j - lo) * hd..(j - lo + 1) * hd],
                    );
                    KvCache::load(
                        t,
                        &vc[cj * vrb..(cj + 1) * vrb],
                        g * hdv,
                        &mut vs[(j - lo) * hdv..(j - lo + 1) * hdv],
                    );
                }
                // The tiled flash kernel's keys, transposed once for the task's tokens.
                let tiled = p.flash && t != KvType::Q8_0;
                let tiled = tiled && (t0..t1).any(|i| step.run[i] as usize >= ggml_order::FLASH_TILED_MIN_TOKENS);
                if tiled {
                    ggml_order::pack_keys_t(ks, hd, lo, kt);
                }
                // The tiled flash kernel's queries, run together after the others.
                let mut tiled_queries: Vec<ggml_order::TiledQuery> = Vec::new();
                for i in t0..t1 {
                    let pos = last[i];
                    let run = step.run[i] as usize;
                    let order = Order::for_batch(run);
                    let first = p.window.map_or(0, |w| (pos + 1).saturating_sub(w)).max(lo);
                    for h in g * group..(g + 1) * group {
                        qs.copy_from_slice(&q[i * qw + h * hd..i * qw + (h + 1) * hd]);
                        // SAFETY: each (token, head) output slice belongs to exactly one task.
                        let o = unsafe { outp.slice(i * ow + h * hdv, hdv) };
                        let kind = match (p.flash, t) {
                            (false, KvType::Q8_0) => None,
                            (false, _) => Some(Kind::Plain),
                            (true, KvType::Q8_0) => Some(Kind::FlashChunk),
                            (true, _) if run >= ggml_order::FLASH_TILED_MIN_TOKENS => Some(Kind::FlashTiled),
                            (true, _) => Some(Kind::FlashChunk),
                        };
                        let sink = sinks.map(|sk| sk[h]);
                        if tiled && kind == Some(Kind::FlashTiled) {
                            // The tiled kernel keeps q in f32.
                            tiled_queries.push(ggml_order::TiledQuery {
                                q: &q[i * qw + h * hd..i * qw + (h + 1) * hd],
                                first,
                                end: pos + 1,
                                sink,
                                out: o,
                            });
                            continue;
                        }
                        // The other kernels convert q like the cache.
                        round_like_cache(t, qs);
                        if let Some(kind) = kind {
                            let (keys, vals, stride) = match in_place {
                                // Head g of cells first..=pos: rows kw / vw floats apart.
                                Some((k, v)) => (
                                    &k[(first - lo) * kw + g * hd..(pos - lo) * kw + (g + 1) * hd],
                                    &v[(first - lo) * vw + g * hdv..(pos - lo) * vw + (g + 1) * hdv],
                                    [kw, vw],
                                ),
                                None => (
                                    &ks[(first - lo) * hd..(pos + 1 - lo) * hd],
                                    &vs[(first - lo) * hdv..(pos + 1 - lo) * hdv],
                                    [hd, hdv],
                                ),
                            };
                            let h = ggml_order::Head {
                                order,
                                f16: t == KvType::F16,
                                scale: p.scale,
                                softcap: p.softcap,
                                sink,
                                first,
                                q: qs,
                                keys,
                                vals,
                                stride,
                                keys_t: None,
                            };
                            ggml_order::attend(kind, &h, sc, lanes, o);
                            continue;
                        }
                        sc.clear();
                        for j in first..=pos {
                            let mut s = dot_f32(qs, &ks[(j - lo) * hd..(j - lo + 1) * hd]) * p.scale;
                            if let Some(cap) = p.softcap {
                                s = (s * (1.0 / cap)).tanh() * cap;
                            }
                            sc.push(s);
                        }
                        match sink {
                            Some(sink) => softmax_sink(sc, sink),
                            None => softmax(sc),
                        }
                        o.fill(0.0);
                        for (jj, &w) in sc.iter().enumerate() {
                            let j = first + jj;
                            axpy(o, w, &vs[(j - lo) * hdv..(j - lo + 1) * hdv]);
                        }
                    }
                }
                if !tiled_queries.is_empty() {
                    let cells = ggml_order::TiledCells {
                        scale: p.scale,
                        softcap: p.softcap,
                        lo,
                        keys: ks,
                        keys_t: kt,
                        vals: vs,
                    };
                    ggml_order::flash_tiled_many(&cells, &mut tiled_queries);
                }
            });
        }
    });
    Ok(())
}

/// A layer's cache as [`encoder`] reads it: the type, then K's and V's (bytes, row bytes,
/// floats per row).
struct EncoderKv<'a> {
    t: KvType,
    k: (&'a [u8], usize, usize),
    v: (&'a [u8], usize, usize),
}

/// Non-causal flash attention through [`encoder_attn`]. Tasks are (sequence, KV head, piece
/// of its queries); each reads its head's keys and values of the whole sequence (in place
/// from an f32 cache whose cells lie in order, else decoded), packs the keys once for all its
/// queries and the group's q heads, and attends [`QB`] queries at a time. A sequence is cut
/// into pieces only when there are too few (sequence, head) pairs to keep the threads busy:
/// every piece packs the keys again.
/// `runs`: each sequence's tokens `i..j` in the step.
fn encoder(
    pool: &Pool,
    simd: encoder_attn::Simd,
    kv: &EncoderKv,
    p: &AttnParams,
    sinks: Option<&[f32]>,
    (q, step, runs): (&[f32], &Step, &[(usize, usize)]),
    out: &mut [f32],
) {
    let (hd, hdv, group) = (p.head_dim, p.head_dim_v, p.n_head / p.n_head_kv);
    let (qw, ow) = (p.n_head * hd, p.n_head * hdv);
    let (kc, krb, kw) = kv.k;
    let (vc, vrb, vw) = kv.v;
    let pairs = (runs.len() * p.n_head_kv).max(1);
    let mut tasks = Vec::new();
    for (r, &(i, j)) in runs.iter().enumerate() {
        let pieces = (4 * pool.n_threads()).div_ceil(pairs).min((j - i).div_ceil(64)).max(1);
        let piece = (j - i).div_ceil(pieces).next_multiple_of(QB);
        for g in 0..p.n_head_kv {
            for a in (i..j).step_by(piece) {
                tasks.push((r, g, a, (a + piece).min(j)));
            }
        }
    }
    // The longest first, so that the last ones handed out are short.
    tasks.sort_by_key(|&(r, _, a, b)| std::cmp::Reverse((runs[r].1 - runs[r].0) * (b - a)));
    let outp = SyncPtr::new(out);
    pool.for_chunks(tasks.len(), 1, |_, range| {
        for &(r, g, a, b) in &tasks[range] {
            let (i, j) = runs[r];
            let n = j - i;
            let cell = |c: usize| step.cells[step.off[i] as usize + c] as usize;
            SCRATCH.with(|s| {
                let Scratch {
                    k: ks,
                    v: vs,
                    keys_t: kt,
                    encoder: es,
                    ..
                } = &mut *s.borrow_mut();
                let in_place = match kv.t {
                    KvType::F32 => f32_rows_in_place((kc, krb), (vc, vrb), cell, 0..n),
                    _ => None,
                };
                let (keys, kstride, vals, vstride) = match in_place {
                    Some((k, v)) => (&k[g * hd..], kw, &v[g * hdv..], vw),
                    None => {
                        ks.resize(n * hd, 0.0);
                        vs.resize(n * hdv, 0.0);
                        for c in 0..n {
                            let cc = cell(c);
                            let (kr, vr) = (&kc[cc * krb..(cc + 1) * krb], &vc[cc * vrb..(cc + 1) * vrb]);
                            KvCache::load(kv.t, kr, g * hd, &mut ks[c * hd..(c + 1) * hd]);
                            KvCache::load(kv.t, vr, g * hdv, &mut vs[c * hdv..(c + 1) * hdv]);
                        }
                        (&ks[..], hd, &vs[..], hdv)
                    }
                };
                pack_keys(keys, kstride, hd, n, kt);
                for h in g * group..(g + 1) * group {
                    let cells = Cells {
                        n,
                        hd,
                        hdv,
                        keys_t: kt,
                        vals,
                        vstride,
                        scale: p.scale,
                        softcap: p.softcap,
                        sink: sinks.map(|sk| sk[h]),
                    };
                    for b0 in (a..b).step_by(QB) {
                        let rows = (b - b0).min(QB);
                        es.start(&cells);
                        for m in 0..rows {
                            let t = b0 + m;
                            es.q[m * hd..(m + 1) * hd].copy_from_slice(&q[t * qw + h * hd..t * qw + (h + 1) * hd]);
                        }
                        encoder_attn::attend(simd, &cells, rows, es);
                        for m in 0..rows {
                            let t = b0 + m;
                            // SAFETY: each (token, head) output slice belongs to exactly one task.
                            let o = unsafe { outp.slice(t * ow + h * hdv, hdv) };
                            o.copy_from_slice(&es.out[m * hdv..(m + 1) * hdv]);
                        }
                    }
                }
            });
        }
    });
}

/// The K and V rows of cells `cells` as f32 slices of an f32 cache (`(bytes, row bytes)` per
/// layer), where the sequence's cells for them lie in order and the bytes are aligned.
fn f32_rows_in_place<'a>(
    (kc, krb): (&'a [u8], usize),
    (vc, vrb): (&'a [u8], usize),
    cell: impl Fn(usize) -> usize,
    cells: std::ops::Range<usize>,
) -> Option<(&'a [f32], &'a [f32])> {
    let (c0, n) = (cell(cells.start), cells.len());
    if !cells.clone().all(|j| cell(j) == c0 + (j - cells.start)) {
        return None;
    }
    let k = bytemuck::try_cast_slice::<u8, f32>(kc.get(c0 * krb..(c0 + n) * krb)?).ok()?;
    let v = bytemuck::try_cast_slice::<u8, f32>(vc.get(c0 * vrb..(c0 + n) * vrb)?).ok()?;
    Some((k, v))
}

/// [`softmax`] with one more logit in the denominator (`ggml_compute_forward_soft_max_f32`
/// with sinks: the max includes it, its `expf` joins the f64 sum).
fn softmax_sink(x: &mut [f32], sink: f32) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max).max(sink);
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    sum += (sink - max).exp() as f64;
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// q is rounded the way ggml's mul_mat converts it to the cache's vec_dot type.
fn round_like_cache(t: KvType, q: &mut [f32]) {
    match t {
        KvType::F32 => {}
        KvType::F16 => {
            for v in q.iter_mut() {
                *v = f16::from_f32(*v).to_f32();
            }
        }
        KvType::Q8_0 => {
            if let Ok(b) = QType::Q8_0.quantize_to_vec(q) {
                let _ = QType::Q8_0.dequantize(&b, q);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::KvLayout;

    /// Sequences of `lens` tokens, each from position 0, sequence s in cells from its offset
    /// on, in reverse order when `reverse` (so no cache rows can be read in place).
    fn step_of(lens: &[usize], reverse: bool) -> Step {
        let mut st = Step::default();
        for &len in lens {
            let off = st.cells.len() as u32;
            for p in 0..len {
                st.tokens.push(p as u32);
                st.pos.push(p as u32);
                st.off.push(off);
                st.run.push(len as u32);
            }
            let cells = (0..len as u32).map(|c| off + if reverse { len as u32 - 1 - c } else { c });
            st.cells.extend(cells);
        }
        st
    }

    fn fill(seed: u32, n: usize) -> Vec<f32> {
        (0..n as u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// An encoder's flash attention (four q heads over two KV heads, sequences of 5, 1 and
    /// 70 tokens, f32, f16 and q8_0 caches, rows in place or decoded, every ISA) against
    /// softmax attention in f64 over the K and V rows the cache holds; and each sequence
    /// alone gives its rows of the batch bit for bit.
    #[test]
    fn encoder_attention_reads_each_sequence_whole() {
        let (n_head, n_kv, hd) = (4, 2, 32);
        let p = AttnParams {
            causal: false,
            flash: true,
            ..AttnParams::new(0, n_head, n_kv, hd)
        };
        let lens = [5usize, 1, 70];
        let n: usize = lens.iter().sum();
        let (qw, kw) = (n_head * hd, n_kv * hd);
        let (q, k, v) = (fill(1, n * qw), fill(2, n * kw), fill(3, n * kw));
        let pool = Pool::new(2);
        let layout = |kv| KvLayout {
            kv,
            n_cells: n,
            n_layer: 1,
            k_width: kw,
            v_width: kw,
        };
        for isa in ["avx512", "avx2", "scalar"] {
            let Ok(isa) = Isa::for_isa(isa) else { continue };
            for (kv_type, reverse) in [
                (KvType::F32, false),
                (KvType::F32, true),
                (KvType::F16, false),
                (KvType::Q8_0, true),
            ] {
                let what = format!("{} {kv_type:?} reversed {reverse}", isa.isa());
                let step = step_of(&lens, reverse);
                let mut kv = KvCache::new(&layout(kv_type));
                let mut out = vec![0f32; n * qw];
                attention(&pool, isa, &mut kv, &p, None, &q, &k, &v, &step, &mut out).unwrap();
                let row = |c: &[u8], t: usize| {
                    let cell = step.cells[step.off[t] as usize + step.pos[t] as usize] as usize;
                    let rb = row_bytes(kv_type, kw);
                    let mut r = vec![0f32; kw];
                    KvCache::load(kv_type, &c[cell * rb..(cell + 1) * rb], 0, &mut r);
                    r
                };
                let (ks, vs): (Vec<_>, Vec<_>) = (0..n).map(|t| (row(&kv.k[0], t), row(&kv.v[0], t))).unzip();
                let mut t0 = 0;
                for &len in &lens {
                    for t in t0..t0 + len {
                        for h in 0..n_head {
                            let g = h / (n_head / n_kv);
                            let qh = &q[t * qw + h * hd..t * qw + (h + 1) * hd];
                            let s: Vec<f64> = (t0..t0 + len)
                                .map(|j| {
                                    let kj = &ks[j][g * hd..(g + 1) * hd];
                                    qh.iter().zip(kj).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() * p.scale as f64
                                })
                                .collect();
                            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                            let w: Vec<f64> = s.iter().map(|&x| (x - max).exp()).collect();
                            let sum: f64 = w.iter().sum();
                            for d in 0..hd {
                                let want: f64 = (t0..t0 + len)
                                    .map(|j| w[j - t0] * vs[j][g * hd + d] as f64)
                                    .sum::<f64>()
                                    / sum;
                                let got = out[t * qw + h * hd + d] as f64;
                                assert!(
                                    (got - want).abs() < 1e-5,
                                    "{what}: token {t} head {h} [{d}]: {got} vs {want}"
                                );
                            }
                        }
                    }
                    t0 += len;
                }
                // The 70-token sequence alone, in cells of its own.
                let alone = step_of(&lens[2..], reverse);
                let mut kv1 = KvCache::new(&layout(kv_type));
                let mut one = vec![0f32; lens[2] * qw];
                let (a, b) = (lens[0] + lens[1], n);
                attention(
                    &pool,
                    isa,
                    &mut kv1,
                    &p,
                    None,
                    &q[a * qw..],
                    &k[a * kw..],
                    &v[a * kw..],
                    &alone,
                    &mut one,
                )
                .unwrap();
                assert!(
                    one == out[a * qw..b * qw],
                    "{what}: the sequence alone differs from its rows of the batch"
                );
            }
        }
    }
}
