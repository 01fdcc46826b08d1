//! Attention of an encoder's step (not causal): each token attends to the whole of its own
//! sequence, from position 0, with no mask. So per (sequence, KV head) the keys are packed
//! once, transposed in blocks of [`KB`] cells, and [`QB`] queries at a time run as three dense
//! steps: their whole score rows (a small matmul against the packed keys), a vectorized
//! softmax over each row, then P·V (a small matmul against the value rows, the 1 / sum
//! applied to the result).
//!
//! This does not follow llama.cpp's summation order as the decoder's kernels do
//! ([`super::ggml_order`]): every query's result depends only on its row and its sequence's
//! cells, never on which block or thread it ran in or on what else is in the batch — what
//! batch-invariant embeddings need. Rows of a block are independent; a block's unused rows
//! are zeros whose results are dropped.
//!
//! Shapes: q `(QB, hd)`, keys packed `(n.div_ceil(KB), hd, KB)`, scores `(QB, n rounded up to
//! KB)`, values `(n, hdv)` rows `vstride` apart, out `(QB, hdv)`.

/// Cells per packed key block: two 16-float vectors on AVX-512, four 8-float ones otherwise.
pub const KB: usize = 32;

/// Queries per pass. Eight keep the score tile (8 × 2 vectors) and the P·V tile (8 queries ×
/// 32 of the head dim) in 16 of AVX-512's 32 registers, each loaded K or V vector serving
/// eight fused multiply-adds.
pub const QB: usize = 8;

/// Which body runs: chosen from the CPU backend's instruction set (`dot::Isa`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Simd {
    Avx512,
    Avx2,
    Portable,
}

impl Simd {
    /// The body for the backend's instruction set `isa` (`Isa::isa`) and value rows `hdv`
    /// wide: the vector bodies need whole vectors of the head dim (16 / 8 floats).
    pub fn for_isa(isa: &str, hdv: usize) -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
            let avx512 = avx2 && is_x86_feature_detected!("avx512f");
            if isa == "avx512" && avx512 && hdv.is_multiple_of(16) {
                return Simd::Avx512;
            }
            if matches!(isa, "avx512" | "avx2") && avx2 && hdv.is_multiple_of(8) {
                return Simd::Avx2;
            }
        }
        let _ = (isa, hdv);
        Simd::Portable
    }
}

/// Packs `n` key rows (`hd` floats each, `stride` floats apart) transposed in blocks of
/// [`KB`] cells: `out[(b * hd + d) * KB + l]` = key `b * KB + l`, element `d`; cells past `n`
/// are zero.
pub fn pack_keys(keys: &[f32], stride: usize, hd: usize, n: usize, out: &mut Vec<f32>) {
    out.clear();
    out.resize(n.div_ceil(KB) * hd * KB, 0.0);
    for j in 0..n {
        let (b, l) = (j / KB, j % KB);
        let dst = &mut out[b * hd * KB + l..];
        for (d, &k) in keys[j * stride..j * stride + hd].iter().enumerate() {
            dst[d * KB] = k;
        }
    }
}

/// One head of one sequence: its `n` cells, keys packed by [`pack_keys`], value rows.
pub struct Cells<'a> {
    pub n: usize,
    pub hd: usize,
    pub hdv: usize,
    pub keys_t: &'a [f32],
    /// Row j at `j * vstride`, `hdv` floats.
    pub vals: &'a [f32],
    pub vstride: usize,
    pub scale: f32,
    /// Logits become `cap · tanh(s · scale / cap)`.
    pub softcap: Option<f32>,
    /// One more logit in the denominator, with no value.
    pub sink: Option<f32>,
}

/// A thread's buffers for [`attend`].
#[derive(Default)]
pub struct Scratch {
    /// `(QB, hd)`: the block's query rows, zeros past the last.
    pub q: Vec<f32>,
    /// `(QB, hdv)`: the block's outputs; rows past the last are scratch.
    pub out: Vec<f32>,
    scores: Vec<f32>,
}

impl Scratch {
    /// Sizes the buffers for `c` and zeroes `q`; fill `q`'s rows, then call [`attend`].
    pub fn start(&mut self, c: &Cells) {
        self.q.clear();
        self.q.resize(QB * c.hd, 0.0);
        self.out.resize(QB * c.hdv, 0.0);
        self.scores.resize(QB * c.n.div_ceil(KB) * KB, 0.0);
    }
}

/// Attends the first `rows` (≤ [`QB`]) of `s.q` over `c` into the same rows of `s.out`.
pub fn attend(simd: Simd, c: &Cells, rows: usize, s: &mut Scratch) {
    debug_assert!(rows <= QB && c.keys_t.len() >= c.n.div_ceil(KB) * c.hd * KB);
    debug_assert!(c.n == 0 || c.vals.len() >= (c.n - 1) * c.vstride + c.hdv);
    debug_assert!(s.q.len() == QB * c.hd && s.out.len() == QB * c.hdv);
    debug_assert!(s.scores.len() == QB * c.n.div_ceil(KB) * KB);
    if c.n == 0 {
        s.out.fill(0.0);
        return;
    }
    match simd {
        // SAFETY: `Simd::for_isa` chose these only where the CPU has the features, and hdv a
        // whole number of the body's vectors; the slices' sizes are asserted above.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => unsafe { x86::attend_avx512(c, rows, s) },
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => unsafe { x86::attend_avx2(c, rows, s) },
        _ => attend_portable(c, rows, s),
    }
}

/// The same steps in plain Rust, over 8-float arrays that compilers vectorize.
fn attend_portable(c: &Cells, rows: usize, s: &mut Scratch) {
    let npad = c.n.div_ceil(KB) * KB;
    let (hd, hdv) = (c.hd, c.hdv);
    // Scores, four queries × 16 cells at a time.
    for m0 in (0..rows).step_by(4) {
        for c0 in (0..npad).step_by(16) {
            let kt = &c.keys_t[(c0 / KB) * hd * KB + c0 % KB..];
            let mut acc = [[0f32; 16]; 4];
            for d in 0..hd {
                let k = &kt[d * KB..d * KB + 16];
                for (m, a) in acc.iter_mut().enumerate() {
                    let qm = s.q[(m0 + m) * hd + d];
                    for l in 0..16 {
                        a[l] += k[l] * qm;
                    }
                }
            }
            for (m, a) in acc.iter().enumerate() {
                s.scores[(m0 + m) * npad + c0..][..16].copy_from_slice(a);
            }
        }
    }
    let mut inv = [0f32; QB];
    for (m, iv) in inv.iter_mut().enumerate().take(rows) {
        *iv = softmax_portable(&mut s.scores[m * npad..m * npad + c.n], c);
    }
    // P·V, a row of the head dim at a time.
    for (m, &iv) in inv.iter().enumerate().take(rows) {
        let p = &s.scores[m * npad..m * npad + c.n];
        let o = &mut s.out[m * hdv..(m + 1) * hdv];
        o.fill(0.0);
        for (j, &pj) in p.iter().enumerate() {
            let v = &c.vals[j * c.vstride..j * c.vstride + hdv];
            for (a, &x) in o.iter_mut().zip(v) {
                *a += x * pj;
            }
        }
        for a in o.iter_mut() {
            *a *= iv;
        }
    }
}

/// Softcap (if any) and scale applied, then `row[j] = exp(row[j] - max)`; returns 1 / the
/// sum (the sink's term included).
fn softmax_portable(row: &mut [f32], c: &Cells) -> f32 {
    let scale = prescale(row, c);
    let mut max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) * scale;
    if let Some(sk) = c.sink {
        max = max.max(sk);
    }
    let mut sum = 0f32;
    for x in row.iter_mut() {
        *x = super::ggml_order::expf(*x * scale - max);
        sum += *x;
    }
    finish_sum(sum, max, c)
}

/// Applies the softcap to raw scores (then the scale is 1) and returns the scale left to
/// apply; a negative scale is applied here too, so that the max of the rest is the max.
#[inline(always)]
fn prescale(row: &mut [f32], c: &Cells) -> f32 {
    match c.softcap {
        Some(cap) => {
            for x in row.iter_mut() {
                *x = cap * (*x * (c.scale / cap)).tanh();
            }
            1.0
        }
        None if c.scale < 0.0 => {
            row.iter_mut().for_each(|x| *x *= c.scale);
            1.0
        }
        None => c.scale,
    }
}

/// 1 / (sum + the sink's exp); 0 for an empty sum.
#[inline(always)]
fn finish_sum(mut sum: f32, max: f32, c: &Cells) -> f32 {
    if let Some(sk) = c.sink {
        sum += (sk - max).exp();
    }
    if sum == 0.0 {
        0.0
    } else {
        1.0 / sum
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;
