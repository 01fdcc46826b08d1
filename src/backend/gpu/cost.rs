//! What one launch of a schedule moves and computes: the bytes it reads (weights, cache and
//! activations apart) and writes, and its arithmetic, counted from its parameters the way the
//! kernel's header comment describes its work. Unique bytes: a row read by several workgroups
//! counts once (the roofline's lower bound), so a kernel that re-reads more than it must shows
//! up as slower than its roofline, not as more bytes.

use super::kernels::act_qtype;
use super::params::{
    AddBiasParams, AddPosRowsParams, ArgmaxParams, AttentionParams, AttentionTileParams, BinaryParams, GetRowsParams,
    KernelParams, KvStoreParams, LayerNormParams, MatmulPackParams, MatmulParams, MoeRouteParams, MoeSlotParams,
    QuantizeActParams, RmsNormParams, RopeParams, SigmoidGateParams, SliceParams, SwigluOaiParams, UnaryParams,
};
use super::schedule::{act_bytes, Launch};
use super::shape::Unit;
use super::table::Kernel;
use crate::backend::KvType;
use crate::quant::QType;

/// The step a launch belongs to: `seqs` sequences of `tokens / seqs` new tokens each, every
/// one after `depth` positions already in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    pub tokens: u64,
    pub seqs: u64,
    pub depth: u64,
}

/// The multiply paths a backend takes for quantized weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Decode rows and prefill tiles in 8-bit integers (dp4a / dot4I8Packed).
    pub int8: bool,
    /// The prefill tiles on the int8 tensor cores (CUDA's `matmul_mma`, sm_80 on).
    pub mma: bool,
    /// The prefill tiles on f16 cooperative matrices (wgpu's `matmul_coop16.wgsl`, where
    /// Vulkan offers them): weights dequantized and tokens converted to halves per tile.
    pub coop_f16: bool,
}

/// One launch's traffic and arithmetic.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// Weight bytes read (each row once).
    pub weights: u64,
    /// KV cache bytes read.
    pub cache: u64,
    /// Other bytes read: activations, norms' weights, partial results.
    pub acts: u64,
    pub written: u64,
    /// Operations (a multiply-add is two).
    pub flops: u64,
    pub unit: Option<Unit>,
    /// f32 operations beside `unit`'s (a multiply-add is two): the tensor-core tiles' scaling of
    /// each integer sum into its float output, which the float pipes do while the tensor cores
    /// multiply — at 1/30 of their rate, so it bounds the tile as often as they do.
    pub epilogue: u64,
}

impl Cost {
    pub fn read(&self) -> u64 {
        self.weights + self.cache + self.acts
    }
}

/// The (token, range) slots of a split-KV launch (`attention_split`, `attention_tile`) whose
/// range holds some of the token's positions, over `per` tokens of each of `seqs` sequences, the
/// first at position `first`: each token's span is cut as kv.cuh's `split_chunk` cuts it (here
/// from the token's own span; a tile cuts its run's, a few positions longer). Only those slots'
/// outputs are written and read back; the others carry a maximum and a sum alone.
fn split_slots(first: u64, per: u64, seqs: u64, n_split: u64, window: u64) -> u64 {
    let n_split = n_split.max(1);
    let used: u64 = (first..first + per)
        .map(|pos| {
            let span = if window > 0 { (pos + 1).min(window) } else { pos + 1 };
            let chunk = span.div_ceil(n_split).div_ceil(64) * 64;
            span.div_ceil(chunk).min(n_split)
        })
        .sum();
    used * seqs
}

/// Bytes of `n` elements of a KV cache of type `kv` (q8_0: 34 bytes per 32).
fn kv_bytes(kv: KvType, n: u64) -> u64 {
    match kv {
        KvType::F32 => 4 * n,
        KvType::F16 => 2 * n,
        KvType::Q8_0 => n / 32 * 34,
    }
}

/// Bytes of a row of `k` elements of `q`.
fn row_bytes(q: QType, k: u64) -> u64 {
    q.bytes_for(k).unwrap_or(4 * k)
}

/// Bytes a matmul (`tiles`: the tiled one) reads of `n` rows of x of length `k` against weights
/// of `q`: the packed 8-bit form (a byte per value, a scale per 32) on the integer paths, else
/// the f32 values (as the f16 cooperative-matrix tiles read them).
fn x_bytes(q: QType, k: u64, n: u64, tiles: bool, paths: Paths) -> u64 {
    match (act_qtype(q), paths.int8 && !(tiles && coop_f16(q, paths))) {
        (Some(_), true) => n * (k + k / 8),
        _ => n * k * 4,
    }
}

/// The multiply unit a matmul over `q` takes.
fn matmul_unit(q: QType, tiles: bool, paths: Paths) -> Unit {
    if tiles && coop_f16(q, paths) {
        return Unit::F16Tensor;
    }
    match (act_qtype(q).is_some() && paths.int8, tiles && paths.mma) {
        (true, true) => Unit::Int8Tensor,
        (true, false) => Unit::Dot4,
        (false, _) => Unit::F32,
    }
}

/// Whether tiles over `q` take the f16 cooperative matrices.
fn coop_f16(q: QType, paths: Paths) -> bool {
    paths.coop_f16 && super::kernels::coop_f16_weights(q)
}

/// f32 instructions per output and 32-element step of `matmul_mma` over weights `q`
/// (`cuda/matmul.cu`): the scaled add of the integer sum (s · d, the integer's float form, the
/// fused add), the offset's term where the format has one, both per half where the halves have
/// scales of their own, and the q8_1 correction of q4_1 / q5_1.
fn mma_epilogue(q: QType) -> u64 {
    let halves = matches!(q, QType::Q2K | QType::Q3K | QType::Q6K);
    let min = matches!(q, QType::Q4_1 | QType::Q5_1 | QType::Q2K | QType::Q4K | QType::Q5K);
    let corr = matches!(q, QType::Q4_1 | QType::Q5_1);
    (3 + min as u64) * if halves { 2 } else { 1 } + corr as u64
}

/// Global load instructions `i8w<Q>::q` issues for one 8-element chunk of weights `q`
/// (`cuda/quant.cuh`): two aligned 8-byte words for eight quant bytes at any offset
/// (`ld_u64_1`), one for eight at a multiple of 8, one for a block's d (and min), q4_K / q5_K's
/// d, dmin and scales in one 16-byte load, a byte for each other scale byte.
fn i8w_loads(q: QType) -> u64 {
    match q {
        QType::Q4K => 2,
        QType::Q4_0 | QType::Q4_1 | QType::Q5_1 | QType::Q8_0 | QType::IQ4NL | QType::MXFP4 | QType::Q5K => 3,
        QType::Q2K => 4,
        QType::Q5_0 => 5,
        QType::Q6K => 6,
        QType::Q3K => 7,
        _ => 8,
    }
}

/// Word loads the WGSL readers (`shaders/quant/*.wgsl`'s dq8) issue for one 8-element chunk of
/// weights `q`: a 16-bit pair for an unaligned word, a word for each scale byte, one word for a
/// block's d and min; q4_K / q5_K counted with the three scale bytes of their upper groups.
fn wgsl_chunk_loads(q: QType) -> u64 {
    match q {
        QType::Q4_1 | QType::Q5_1 => 3,
        QType::Q2K => 4,
        QType::Q4_0 | QType::Q8_0 | QType::IQ4NL | QType::Q4K => 5,
        QType::Q5K => 6,
        QType::Q5_0 => 7,
        QType::MXFP4 => 9,
        QType::Q6K => 10,
        QType::Q3K => 11,
        _ => 8,
    }
}

/// L1 wavefronts of the tensor-core matmul (`cuda/matmul.cu`'s matmul_mma) over `rows` weights
/// of `q` and `n` tokens of length `k`, in tiles `cols` tokens wide, counted per warp and step
/// the way the kernel reads: each weight load of a warp touches two rows (two wavefronts), as
/// does each token load; a warp's 64-bit stores of whole rows into shared memory take two,
/// other stores and every fragment or scale read one (conflict-free, or a few addresses each
/// shared by several lanes); an ldmatrix of four matrices four. A lane's two rows' scales are one
/// read a block, as are its two tokens' d. A row's scales are read and stored once a block (and
/// half), by the threads of its scale items. With offsets, the rows' m and the tokens' d · Σ q_x
/// (split in two for the tf32 products) are 64-bit stores and reads: two wavefronts a warp's,
/// once a step. The K-quants' tiles (integer sub-block scales) read the tokens' d once a step,
/// and store and read each row's d.
///
/// The same count of the 64-row tiles it replaced (a row per pair of lanes, 16 rows a warp's
/// load) gives 596 k wavefronts per SM for a 4,096² q4_K weight at 512 tokens; Nsight Compute
/// measured 545 k active cycles at 90 % L1 throughput there (perf/h200-2026-12-04.md).
pub fn mma_l1_wavefronts(q: QType, k: u64, rows: u64, n: u64, cols: u64) -> u64 {
    use super::kernels::{MMA_ROWS, MMA_STEP};
    let halves = matches!(q, QType::Q2K | QType::Q3K | QType::Q6K);
    let min = matches!(q, QType::Q4_1 | QType::Q5_1 | QType::Q2K | QType::Q4K | QType::Q5K) as u64;
    let act = matches!(q, QType::Q4_1 | QType::Q5_1) as u64;
    let ksi = matches!(q, QType::Q2K | QType::Q3K | QType::Q4K | QType::Q5K | QType::Q6K) as u64;
    let nh = 1 + halves as u64;
    let (wl, xl, nj) = (MMA_ROWS as u64 / 16, cols / 16, cols / 16);
    let blocks_per_step = MMA_STEP as u64 / 32;
    let global = 2 * wl * i8w_loads(q) + 2 * 2 * xl + act * 2 * xl;
    // The scale items (a thread's rows, blocks and halves a step; `matmul_mma`'s s_row): each
    // store of a warp's s takes one wavefront, two with halves (two lanes a bank); of its m, two.
    let sl = MMA_ROWS as u64 * blocks_per_step * nh / super::table::MMA_MATMUL_THREADS as u64;
    let stores = 2 * wl + sl * nh + min * 2 * sl + ksi * sl + 2 * xl + xl * (1 + min);
    // Per block two ldmatrix of A, two scale reads, B (half an ldmatrix a token block) and the
    // tokens' d; with integer scales (i8k) the tokens' d once a step, and the rows' d.
    let reads = if ksi == 1 {
        blocks_per_step * (8 + 2 + 2 * nj) + nj + 2
    } else {
        blocks_per_step * (8 + 2 + 3 * nj)
    } + min * nh * (2 * 2 * 2 + 2 * nj);
    let warps = super::table::MMA_MATMUL_THREADS as u64 / 32;
    let tiles = rows.div_ceil(MMA_ROWS as u64) * n.div_ceil(cols);
    tiles * k.div_ceil(MMA_STEP as u64) * warps * (global + stores + reads)
}

/// Instructions a warp of `matmul_mma` issues for one step (128 elements of k) of its tile,
/// weights `q`, at each tile width (16, 32, 64 tokens), as NVRTC 12.9 compiles them for sm_90
/// (`nvdisasm`: the loop over the steps; `gpu::cuda::mma_step_instructions_are_the_kernels'`
/// holds these to the disassembly). Of the 64-wide q4_K step's 868: 32 IMMA; 128 IMAD, the
/// integer sub-block scales (one an output and block) and 96 scaling the sums once a step; 24
/// tf32 HMMA for the offsets; 46 shared-memory reads (24 of them ldmatrix); the rest loads,
/// unpacks and stores.
pub fn mma_step_instructions(q: QType, cols: u64) -> Option<u64> {
    let per = match q {
        QType::Q4_0 => [507, 637, 895],
        QType::Q4_1 => [490, 580, 925],
        QType::Q5_0 => [719, 849, 1107],
        QType::Q5_1 => [652, 745, 1136],
        QType::Q8_0 => [425, 555, 813],
        QType::IQ4NL => [879, 1007, 1265],
        QType::MXFP4 => [894, 940, 1220],
        QType::Q2K => [641, 826, 1240],
        QType::Q3K => [757, 889, 1208],
        QType::Q4K => [426, 492, 868],
        QType::Q5K => [511, 589, 955],
        QType::Q6K => [769, 887, 1241],
        _ => return None,
    };
    super::kernels::MMA_COLS
        .iter()
        .position(|&c| c as u64 == cols)
        .map(|i| per[i])
}

/// Warp instructions the tensor-core matmul issues over `rows` weights of `q` and `n` tokens of
/// length `k` in tiles `cols` tokens wide (`mma_step_instructions` a warp and step).
pub fn mma_issue(q: QType, k: u64, rows: u64, n: u64, cols: u64) -> Option<u64> {
    use super::kernels::{MMA_ROWS, MMA_STEP};
    let warps = super::table::MMA_MATMUL_THREADS as u64 / 32;
    let tiles = rows.div_ceil(MMA_ROWS as u64) * n.div_ceil(cols);
    Some(tiles * k.div_ceil(MMA_STEP as u64) * warps * mma_step_instructions(q, cols)?)
}

/// L1 wavefronts of the f16 cooperative-matrix matmul (`matmul_coop16.wgsl`) over `rows`
/// weights of `q` and `n` tokens of length `k`, in tiles of 64 rows × `cols` tokens, counted
/// per subgroup and 64-element step as `mma_l1_wavefronts` counts CUDA's: a weight load of
/// the subgroup touches four rows (four wavefronts), `wgsl_chunk_loads` of them a chunk; each
/// chunk's eight halves are stored one by one, the four rows' pairs in rotated order so no two
/// lanes meet in a bank; a token load
/// touches two tokens' four lines, its four half stores likewise one wavefront each; each 16 × 16
/// operand load takes four (512 bytes), two A and two B per 16 elements of k in the 64-token
/// tiles, one A and two B in the 32-token ones. (q4_1 / q5_1's offsets and corrections, a few
/// loads a block, are left out.)
pub fn coop16_l1_wavefronts(q: QType, k: u64, rows: u64, n: u64, cols: u64) -> u64 {
    use super::kernels::{COOP_THREADS, COOP_TILE};
    const TK: u64 = 64;
    let wl = COOP_TILE as u64 * 8 / COOP_THREADS as u64; // chunks an invocation loads a step
    let xl = cols * 16 / COOP_THREADS as u64; // vec4s of tokens likewise
    let weights = wl * wgsl_chunk_loads(q) * 4 + wl * 8;
    let tokens = xl * 4 + xl * 4;
    let operands = TK / 16 * if cols >= COOP_TILE as u64 { 4 } else { 3 } * 4;
    let subgroups = COOP_THREADS as u64 / 32;
    let tiles = rows.div_ceil(COOP_TILE as u64) * n.div_ceil(cols);
    tiles * k.div_ceil(TK) * subgroups * (weights + tokens + operands)
}

/// Σ over a sequence's new tokens t0..t0 + n of the positions each attends (causal, after
/// `depth`, at most `window` where the layer has one).
fn attended(depth: u64, t0: u64, n: u64, window: u64) -> u64 {
    (t0..t0 + n)
        .map(|t| {
            let ctx = depth + t + 1;
            if window > 0 {
                ctx.min(window)
            } else {
                ctx
            }
        })
        .sum()
}

/// The cost of launch `l` in a step of shape `s`, with a KV cache of type `kv`.
pub fn cost(l: &Launch, s: StepShape, kv: KvType, paths: Paths) -> Cost {
    let w = &l.params;
    let f = |n: u64| n * 4;
    let mut c = Cost::default();
    match l.variant.kernel {
        Kernel::QuantizeAct => {
            let p = QuantizeActParams::from_words(w);
            let (k, n) = (p.k as u64, p.n as u64);
            // Split blocks read their block twice (the second time from L2).
            c.acts = f(n * k) * p.split.max(1) as u64;
            c.written = n * act_bytes(k as usize);
            c.flops = 3 * n * k;
            c.unit = Some(Unit::F32);
        }
        Kernel::MatmulVec | Kernel::Matmul | Kernel::MatmulVecId => {
            let p = MatmulParams::from_words(w);
            let q = l.variant.qtype.unwrap_or(QType::F32);
            let (k, n, rows) = (p.k as u64, p.n as u64, p.rows as u64);
            // Experts: one (token, slot) per workgroup z, each reading its expert's rows.
            let (cols, experts) = match l.variant.kernel {
                Kernel::MatmulVecId => {
                    let cols = l.groups[2] as u64;
                    (cols, cols.min(p.n_expert as u64))
                }
                _ => (n, 1),
            };
            c.weights = experts * rows * row_bytes(q, k);
            let tiles = l.variant.kernel == Kernel::Matmul;
            c.acts = x_bytes(q, k, n, tiles, paths) + if p.bias != 0 { f(rows) } else { 0 };
            c.written = f(cols * rows);
            if p.acc != 0 {
                c.acts += f(cols * rows);
            }
            c.flops = 2 * k * rows * cols;
            c.unit = Some(matmul_unit(q, tiles, paths));
            if c.unit == Some(Unit::Int8Tensor) {
                // Instructions of one lane each; a multiply-add counts two in the f32 peak.
                c.epilogue = 2 * mma_epilogue(q) * rows * cols * (k / 32);
            }
            if c.unit == Some(Unit::F16Tensor) {
                // Each tile dequantizes its rows (a multiply-add and a conversion per element)
                // and converts its tokens (one per element); counted for the 64-token tiles
                // (the 32-token ones of a small grid dequantize twice as often).
                let t = super::kernels::COOP_TILE as u64;
                c.epilogue = 2 * 2 * rows * k * cols.div_ceil(t) + 2 * cols * k * rows.div_ceil(t);
            }
        }
        Kernel::MatmulVecPack => {
            let p = MatmulPackParams::from_words(w);
            let q = l.variant.qtype.unwrap_or(QType::F32);
            let (k, n) = (p.k as u64, p.n as u64);
            let rows = (p.rows0 + p.rows1 + p.rows2) as u64;
            c.weights = rows * row_bytes(q, k);
            // A folded norm reads the f32 row (and its weight) and rounds it itself.
            c.acts = match p.norm {
                0 => x_bytes(q, k, n, false, paths),
                _ => f(n * k + k),
            } + if p.bias != 0 { f(rows) } else { 0 };
            c.written = f(n * rows);
            c.flops = 2 * k * rows * n;
            c.unit = Some(matmul_unit(q, false, paths));
        }
        Kernel::GetRows => {
            let p = GetRowsParams::from_words(w);
            let q = l.variant.qtype.unwrap_or(QType::F32);
            let (k, n) = (p.k as u64, p.n as u64);
            c.weights = n * row_bytes(q, k);
            c.acts = f(n);
            c.written = f(n * k);
            c.flops = n * k;
            c.unit = Some(Unit::F32);
        }
        Kernel::RmsNorm => {
            let p = RmsNormParams::from_words(w);
            let (rows, width) = (p.rows as u64, p.width as u64);
            c.weights = if p.plain != 0 { 0 } else { f(width) };
            c.acts = f(rows * width);
            c.written = f(rows * width)
                + if p.act != 0 {
                    rows * act_bytes(width as usize)
                } else {
                    0
                };
            c.flops = 4 * rows * width;
            c.unit = Some(Unit::F32);
        }
        Kernel::AddBias | Kernel::ScaleBy => {
            let p = AddBiasParams::from_words(w);
            c.weights = f(p.width as u64);
            c.acts = f(p.n as u64);
            c.written = f(p.n as u64);
            c.flops = p.n as u64;
            c.unit = Some(Unit::F32);
        }
        Kernel::Add | Kernel::Mul | Kernel::Swiglu | Kernel::Geglu => {
            let p = BinaryParams::from_words(w);
            let n = p.n as u64;
            c.acts = f(2 * n);
            // The fused rounding writes the 8-bit form of its rows too.
            c.written = f(n) + if p.act != 0 { n + n / 4 } else { 0 };
            c.flops = n * if l.variant.kernel == Kernel::Add || l.variant.kernel == Kernel::Mul {
                1
            } else {
                8
            };
            c.unit = Some(Unit::F32);
        }
        Kernel::Scale | Kernel::Softcap => {
            let n = UnaryParams::from_words(w).n as u64;
            (c.acts, c.written, c.flops, c.unit) = (f(n), f(n), n, Some(Unit::F32));
        }
        Kernel::Gelu => {
            let n = UnaryParams::from_words(w).n as u64;
            (c.acts, c.written, c.flops, c.unit) = (f(n), f(n), 12 * n, Some(Unit::F32));
        }
        Kernel::LayerNorm => {
            let p = LayerNormParams::from_words(w);
            let (rows, width) = (p.rows as u64, p.width as u64);
            c.weights = f(2 * width);
            // Three passes over the row.
            c.acts = f(3 * rows * width);
            c.written = f(rows * width);
            c.flops = 7 * rows * width;
            c.unit = Some(Unit::F32);
        }
        Kernel::AddPosRows => {
            let p = AddPosRowsParams::from_words(w);
            let n = p.n as u64;
            c.weights = f(n);
            c.acts = f(n) + f(n / p.width.max(1) as u64);
            c.written = f(n);
            c.flops = n;
            c.unit = Some(Unit::F32);
        }
        Kernel::Argmax => {
            let p = ArgmaxParams::from_words(w);
            let (n, parts) = (p.n as u64, p.parts as u64);
            (c.acts, c.written, c.flops) = match (parts > 1, p.stage) {
                (false, _) => (f(n), 4, n),
                (true, 0) => (f(n), 8 * parts, n),
                (true, _) => (8 * parts, 4, parts),
            };
            c.unit = Some(Unit::F32);
        }
        Kernel::Rope => {
            let p = RopeParams::from_words(w);
            let n = (p.n * p.n_heads * p.head_dim) as u64;
            c.acts = f(n) + f(p.n as u64 * p.n_rot as u64);
            c.written = f(n);
            c.flops = 3 * n;
            c.unit = Some(Unit::F32);
        }
        Kernel::KvStore => {
            let p = KvStoreParams::from_words(w);
            let n = p.n as u64 * (p.kw + p.vw) as u64;
            c.acts = f(n);
            c.written = kv_bytes(kv, n);
            c.flops = n;
            c.unit = Some(Unit::F32);
        }
        Kernel::Attention | Kernel::AttentionSplit | Kernel::AttentionTile => {
            // The fields both parameter structs have.
            macro_rules! shape {
                ($p:expr) => {{
                    let p = $p;
                    (
                        p.n_head,
                        p.n_head_kv,
                        p.head_dim,
                        p.head_dim_v,
                        p.window,
                        p.t0,
                        p.n_split,
                    )
                }};
            }
            let (n_head, n_kv, hd, hdv, window, t0, n_split) = match l.variant.kernel {
                Kernel::AttentionTile => shape!(AttentionTileParams::from_words(w)),
                _ => shape!(AttentionParams::from_words(w)),
            };
            let (n_head, n_kv, hd, hdv) = (n_head as u64, n_kv as u64, hd as u64, hdv as u64);
            // The launch's query tokens, and of each sequence its share.
            let tokens = match l.variant.kernel {
                Kernel::Attention => l.groups[1] as u64,
                Kernel::AttentionSplit => l.groups[2] as u64,
                _ => s
                    .tokens
                    .saturating_sub(t0 as u64)
                    .min(super::schedule::ATTN_TOKENS as u64),
            };
            let seqs = s.seqs.clamp(1, tokens.max(1));
            let per = tokens / seqs;
            let t0 = if seqs > 1 { 0 } else { t0 as u64 };
            let span = (s.depth + t0 + per).min(if window > 0 { window as u64 } else { u64::MAX });
            c.cache = seqs * kv_bytes(kv, span * n_kv * (hd + hdv));
            c.acts = f(tokens * n_head * hd);
            c.written = match l.variant.kernel {
                Kernel::Attention => f(tokens * n_head * hdv),
                // Every slot's maximum and sum; the outputs of the slots that hold positions.
                _ => {
                    let used = split_slots(s.depth + t0, per, seqs, n_split as u64, window as u64);
                    f(n_head * (2 * n_split as u64 * tokens + used * hdv))
                }
            };
            c.flops = 2 * n_head * (hd + hdv) * seqs * attended(s.depth, t0, per, window as u64);
            c.unit = Some(Unit::F32);
            if l.variant.kernel == Kernel::AttentionTile {
                // Each score's scale, mask, running maximum, exponential and sum in f32, beside
                // the products (which the tensor-core entry moves onto the f16 tensor cores).
                c.epilogue = 8 * c.flops / (2 * (hd + hdv)).max(1);
            }
        }
        Kernel::AttentionReduce => {
            let p = AttentionParams::from_words(w);
            let tokens = l.groups[1] as u64;
            let (h, hdv) = (p.n_head as u64, p.head_dim_v as u64);
            // Each of a head's parts reads every range's weights, and the outputs of the ranges
            // that hold positions.
            let parts = (l.groups[0] as u64 / h.max(1)).max(1);
            let seqs = s.seqs.clamp(1, tokens.max(1));
            let t0 = if seqs > 1 { 0 } else { p.t0 as u64 };
            let used = split_slots(s.depth + t0, tokens / seqs, seqs, p.n_split as u64, p.window as u64);
            c.acts = f(h * (2 * parts * p.n_split as u64 * tokens + used * hdv));
            c.written = f(tokens * h * hdv);
            c.flops = 2 * p.n_split as u64 * tokens * h * hdv;
            c.unit = Some(Unit::F32);
        }
        Kernel::MoeRoute => {
            let p = MoeRouteParams::from_words(w);
            let n = (p.rows * p.n_expert) as u64;
            (c.acts, c.written, c.flops, c.unit) = (f(n), f(2 * p.rows as u64 * p.k as u64), 4 * n, Some(Unit::F32));
        }
        // add_bias_id: n elements, one bias row each; moe_sum: n outputs of k slots each.
        Kernel::AddBiasId | Kernel::MoeSum => {
            let p = MoeSlotParams::from_words(w);
            let (n, k) = (p.n as u64, p.k.max(1) as u64);
            let slots = if l.variant.kernel == Kernel::MoeSum { k } else { 1 };
            c.acts = f(n * slots);
            c.written = f(n);
            c.flops = n * slots;
            c.unit = Some(Unit::F32);
        }
        Kernel::SwigluOai => {
            let n = SwigluOaiParams::from_words(w).n as u64;
            (c.acts, c.written, c.flops, c.unit) = (f(2 * n), f(n), 10 * n, Some(Unit::F32));
        }
        Kernel::SigmoidGate => {
            let n = SigmoidGateParams::from_words(w).n as u64;
            (c.acts, c.written, c.flops, c.unit) = (f(2 * n), f(n), 6 * n, Some(Unit::F32));
        }
        Kernel::Slice => {
            let n = SliceParams::from_words(w).n as u64;
            (c.acts, c.written, c.unit) = (f(n), f(n), Some(Unit::F32));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::split_slots;

    /// A token's span cut into ranges of whole 64-position tiles: the ranges past its last
    /// position hold nothing, at the start of a context or inside a sliding window.
    #[test]
    fn split_slots_count_the_ranges_that_hold_positions() {
        // Position 0, 8 ranges: one range of one position.
        assert_eq!(split_slots(0, 1, 1, 8, 0), 1);
        // Positions 0 .. 511 over 4 ranges: ranges of 64 up to a span of 256 (64 tokens each
        // at 1, 2, 3, 4 ranges), then of 128 (128 tokens each at 3, 4): three a token, not four.
        assert_eq!(split_slots(0, 512, 1, 4, 0), 64 * (1 + 2 + 3 + 4) + 128 * (3 + 4));
        // After 4,096 positions every range holds some; two sequences count twice.
        assert_eq!(split_slots(4096, 256, 2, 8, 0), 2 * 256 * 8);
        // A 100-position window: two ranges of 64 whatever the depth.
        assert_eq!(split_slots(4096, 10, 1, 8, 100), 10 * 2);
    }
}
