//! The kernels every GPU backend implements (one row each in `table.rs`), and their variants:
//! each kernel specialised per weight qtype, float vector type, KV cache type or activation
//! format, as its row says. The wgpu backend builds a variant from WGSL (`shaders/`), the CUDA
//! backend from CUDA C++ (`cuda/`); both run the same schedule (`schedule/`): the same
//! parameters, bindings and workgroup counts per dispatch.

use std::collections::{HashMap, HashSet};

use super::table::{Kernel, Spec};
use crate::backend::{KvType, Refusal};
use crate::model::{Attn, Graph, Model, Op};
use crate::quant::{qtype_list, QType, Role};

qtype_list! {
    /// The weight qtypes the GPU kernels read (role `Weight` in the qtype table), in table
    /// order; `q8_1` and `q8_K` are activation-only formats.
    pub const WEIGHT_QTYPES = |r| matches!(r.role, Role::Weight);
}

qtype_list! {
    /// The float weight qtypes, the only ones the vector ops (`rms_norm`, `add_bias`) read.
    pub const VECTOR_QTYPES = |r| matches!(r.role, Role::Weight) && !r.qtype.is_quantized();
}

/// Whether the GPU kernels read weights of this qtype.
pub fn has_weight_kernel(q: QType) -> bool {
    q.has_gpu_kernel()
}

/// The 8-bit format a matmul rounds its activations to before it meets weights of qtype `w`:
/// the table's activation partner (q8_0, q8_1 or q8_K, as ggml pairs them), the one the CPU
/// backend's dot products take too, so that every backend multiplies the same activation
/// values. `None` for float weights (f32 activations).
pub fn act_qtype(w: QType) -> Option<QType> {
    match w.act() {
        QType::F32 => None,
        a => Some(a),
    }
}

qtype_list! {
    /// The activation formats `quantize_act` writes: the quantized partners of the GPU weight
    /// types, in table order (`quantize_act.wgsl`'s `ACT` is the index here).
    pub const ACT_QTYPES = |r| r.qtype.is_quantized() && r.qtype.is_act_of(Role::Weight);
}

/// A kernel specialised for a weight qtype and/or KV type, with or without subgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    pub kernel: Kernel,
    pub qtype: Option<QType>,
    pub kv: Option<KvType>,
    pub subgroups: bool,
}

impl Variant {
    pub fn new(kernel: Kernel) -> Variant {
        Variant {
            kernel,
            qtype: None,
            kv: None,
            subgroups: false,
        }
    }

    pub fn with_qtype(kernel: Kernel, q: QType) -> Variant {
        Variant {
            qtype: Some(q),
            ..Variant::new(kernel)
        }
    }

    pub fn with_kv(kernel: Kernel, kv: KvType) -> Variant {
        Variant {
            kv: Some(kv),
            ..Variant::new(kernel)
        }
    }

    /// The same variant on the subgroup path, where the kernel has one.
    pub fn subgroups(self, on: bool) -> Variant {
        Variant {
            subgroups: on && self.kernel.reduces(),
            ..self
        }
    }

    /// `matmul_vec/q4_0/sg`, `attention/kv_f16`, `add`.
    pub fn name(&self) -> String {
        let mut s = self.kernel.name().to_string();
        if let Some(q) = self.qtype {
            s += "/";
            s += q.name();
        }
        if let Some(kv) = self.kv {
            s += "/kv_";
            s += kv.name();
        }
        if self.subgroups {
            s += "/sg";
        }
        s
    }

    /// The kernel's entry point in `cuda/<kernel>.cu`: `matmul_vec_q4_K`, `attention_kv_f16`,
    /// `add` (one entry serves both reduction paths).
    pub fn entry(&self) -> String {
        let mut s = self.kernel.name().to_string();
        if let Some(q) = self.qtype {
            s += "_";
            s += q.name();
        }
        if let Some(kv) = self.kv {
            s += "_kv_";
            s += kv.name();
        }
        s
    }
}

impl Variant {
    /// Whether the variant has tensor-core entries (`mma_entry`), which the CUDA backend launches
    /// in `entry`'s place where the device has `mma.sync` and the launch suits them
    /// (`mma_launch`): the prefill matmul over quantized weights with an integer form (int8
    /// tiles), and the prefill attention over an f16 or q8_0 cache (f16 tiles; the q8_0 scores
    /// in int8).
    pub fn has_mma(&self) -> bool {
        match (self.kernel, self.qtype, self.kv) {
            (Kernel::Matmul, Some(q), _) => act_qtype(q).is_some(),
            (Kernel::AttentionTile, _, Some(KvType::F16 | KvType::Q8_0)) => true,
            _ => false,
        }
    }

    /// The sizes the tensor-core entries come in: the matmul's token tile widths, the
    /// attention's head sizes (those of whole q8_0 blocks for that cache).
    pub fn mma_sizes(&self) -> &'static [u32] {
        match (self.has_mma(), self.kernel, self.kv) {
            (true, Kernel::Matmul, _) => &MMA_COLS,
            (true, Kernel::AttentionTile, Some(KvType::Q8_0)) => &MMA_HEAD_DIMS_Q8_0,
            (true, Kernel::AttentionTile, _) => &MMA_HEAD_DIMS,
            _ => &[],
        }
    }

    /// The tensor-core entry of size `size` (`matmul_mma64_q4_K` in `cuda/matmul.cu`,
    /// `attention_tile_mma128_kv_f16` in `cuda/attention_tile.cu`); `None` for a variant without
    /// one.
    pub fn mma_entry(&self, size: u32) -> Option<String> {
        if !self.mma_sizes().contains(&size) {
            return None;
        }
        match (self.kernel, self.qtype, self.kv) {
            (Kernel::Matmul, Some(q), _) => Some(format!("matmul_mma{size}_{}", q.name())),
            (_, _, Some(kv)) => Some(format!("attention_tile_mma{size}_kv_{}", kv.name())),
            _ => None,
        }
    }

    /// Every tensor-core entry of the variant, one per size.
    pub fn mma_entries(&self) -> Vec<String> {
        self.mma_sizes().iter().filter_map(|&c| self.mma_entry(c)).collect()
    }

    /// The token tile width of the tensor-core entry for `n` tokens against `rows` weight rows
    /// on a device of `sms` SMs: the narrowest tile that holds the tokens, narrowed further
    /// (down to `MMA_COLS[0]`) while the tiles would leave SMs without one. Wide tiles read each
    /// weight tile for more tokens; narrow ones spread a short step or a GQA K/V weight over
    /// the device.
    pub fn mma_cols(n: u32, rows: u32, sms: u32) -> u32 {
        let row_tiles = rows.div_ceil(MMA_ROWS);
        let mut i = MMA_COLS.iter().position(|&c| c >= n).unwrap_or(MMA_COLS.len() - 1);
        while i > 0 && row_tiles * n.div_ceil(MMA_COLS[i]) < sms {
            i -= 1;
        }
        MMA_COLS[i]
    }

    /// Stream-k for `tiles` tensor-core tiles of a `k`-long matmul on `sms` SMs: the tiles past
    /// the last whole round of `MMA_BLOCKS_PER_SM` blocks an SM (all of them where there are
    /// fewer), as (those tiles, the blocks that share their steps evenly), where a block's share
    /// is at most three quarters of a tile. Those tiles would otherwise take a round of their
    /// own with places left idle: the FFN's 688 tiles of a 7B model at 512 tokens on an H200's
    /// 264 places (160 of them in a third round, 0.6 of a round's work), or the 64 tiles of a
    /// 4,096² weight at 32 tokens (a quarter of the places, each tile now cut into runs of about
    /// eight of its 32 steps). None where the last round is near full, or a tile too short to
    /// cut: a block per tile.
    pub fn mma_stream_k(tiles: u32, k: u32, sms: u32) -> Option<(u32, u32)> {
        let places = MMA_BLOCKS_PER_SM * sms;
        let (rest, steps) = (tiles % places, k.div_ceil(MMA_STEP));
        if rest == 0 {
            return None;
        }
        let work = rest as u64 * steps as u64;
        let share = work.div_ceil(places as u64);
        // The kernel counts steps × blocks in 32 bits.
        let fits = work * places as u64 <= u32::MAX as u64;
        (fits && 4 * share <= 3 * steps as u64).then(|| (rest, places.min(work as u32)))
    }

    /// Threads per block of the variant's tensor-core entries: the matmul's eight warps
    /// (`table::MMA_MATMUL_THREADS`), the attention's four (`table::MMA_THREADS`).
    pub fn mma_threads(&self) -> u32 {
        match self.kernel {
            Kernel::Matmul => super::table::MMA_MATMUL_THREADS,
            _ => super::table::MMA_THREADS,
        }
    }

    /// The launch with parameters `params` on grid `groups` (the schedule's) as a tensor-core
    /// entry on a device of `sms` SMs, where the variant has one that suits it: the matmul's
    /// tiles of `MMA_ROWS` rows × `mma_cols` tokens, the last of them shared out by
    /// `mma_stream_k` (then a grid of one row); the
    /// attention's tiles of `mma_attention_rows` (`tq` rewritten to the tokens that make them,
    /// a power of two so a tile never crosses a launch of `ATTN_TOKENS`) where head_dim =
    /// head_dim_v is a size it has.
    pub fn mma_launch(&self, params: &[u32; 16], groups: [u32; 3], sms: u32) -> Option<MmaLaunch> {
        use super::params::{AttentionTileParams, KernelParams, MatmulParams};
        if !self.has_mma() {
            return None;
        }
        let threads = self.mma_threads();
        match self.kernel {
            Kernel::Matmul => {
                let mut p = MatmulParams::from_words(params);
                let cols = Variant::mma_cols(p.n, p.rows, sms);
                let tiles = [p.rows.div_ceil(MMA_ROWS), p.n.div_ceil(cols)];
                let all = tiles[0] * tiles[1];
                let grid = match Variant::mma_stream_k(all, p.k, sms) {
                    Some((sk_tiles, workers)) => {
                        (p.sk_tiles, p.sk_workers) = (sk_tiles, workers);
                        [all - sk_tiles + workers, 1, 1]
                    }
                    None => [tiles[0], tiles[1], 1],
                };
                Some(MmaLaunch {
                    size: cols,
                    grid,
                    threads,
                    params: p.words(),
                })
            }
            _ => {
                let mut p = AttentionTileParams::from_words(params);
                self.mma_entry(p.head_dim)?;
                p.tq = Variant::mma_attention_tq(p.head_dim, p.head_dim_v, p.hg)?;
                let n = p.n.saturating_sub(p.t0).min(super::schedule::ATTN_TOKENS);
                Some(MmaLaunch {
                    size: p.head_dim,
                    grid: [groups[0], groups[1], n.div_ceil(p.tq)],
                    threads,
                    params: p.words(),
                })
            }
        }
    }
}

impl Variant {
    /// The query tokens a tile of the tensor-core attention takes (`mma_attention_rows` rows
    /// of `hg` heads, a power of two so a tile never crosses a launch of `ATTN_TOKENS`), where
    /// head sizes `hd`, `hdv` suit it (equal, and one of `MMA_HEAD_DIMS`).
    pub fn mma_attention_tq(hd: u32, hdv: u32, hg: u32) -> Option<u32> {
        let rows = mma_attention_rows(hd);
        (hd == hdv && MMA_HEAD_DIMS.contains(&hd) && (1..=rows).contains(&hg)).then(|| 1 << (rows / hg).ilog2())
    }
}

impl Variant {
    /// Whether the variant has a body on f16 cooperative matrices (`wgpu::shaders::Coop::F16x16`):
    /// the tiled matmul over quantized and f16 weights (f32 and bf16 values, which halves would
    /// round or overflow, keep the f32 tile), and the prefill attention over an f16 or q8_0
    /// cache (for the head sizes `coop_attention_tq` takes).
    pub fn takes_coop_f16(&self) -> bool {
        match self.kernel {
            Kernel::Matmul => self.qtype.is_some_and(coop_f16_weights),
            // attention_tile_coop16.wgsl: the f16 cache's own halves, or q8_0's integers.
            Kernel::AttentionTile => matches!(self.kv, Some(KvType::F16 | KvType::Q8_0)),
            _ => false,
        }
    }

    /// The grid of the launch with parameters `params` as the f16 cooperative-matrix tile
    /// (`matmul_coop16.wgsl`: `COOP_TILE` rows × `COOP_TILE` tokens of `COOP_THREADS`, or half
    /// as many tokens where that would leave some of the `sms` SMs without a tile; the tile
    /// reads its width off the grid) where the variant takes it. The schedule's grid is of
    /// 32 × 32 tiles.
    pub fn coop_f16_grid(&self, params: &[u32; 16], sms: u32) -> Option<[u32; 3]> {
        use super::params::{KernelParams, MatmulParams};
        if self.kernel != Kernel::Matmul {
            return None;
        }
        let p = MatmulParams::from_words(params);
        let rows = p.rows.div_ceil(COOP_TILE);
        let cols = match rows * p.n.div_ceil(COOP_TILE) >= sms {
            true => COOP_TILE,
            false => COOP_TILE / 2,
        };
        self.takes_coop_f16().then(|| [rows, p.n.div_ceil(cols), 1])
    }
}

impl Variant {
    /// The query tokens a tile of the f16 cooperative-matrix attention takes
    /// (`attention_tile_coop16.wgsl`: `coop_attention_rows` rows of `hg` heads, a power of two
    /// so a tile never crosses a launch of `ATTN_TOKENS`), where head sizes `hd`, `hdv` suit it
    /// over a cache of `kv`: equal, and a multiple of 16 up to 128 (32-row tiles) or of 64 up to
    /// 256 (16-row tiles, whose four subgroups each score a quarter of the head); over q8_0 of
    /// whole 32-element blocks (32 and 128).
    pub fn coop_attention_tq(kv: KvType, hd: u32, hdv: u32, hg: u32) -> Option<u32> {
        let rows = coop_attention_rows(hd);
        let block = if kv == KvType::Q8_0 { 32 } else { 16 };
        let step = if rows == COOP_ATTN_ROWS { block } else { 4 * block };
        let fits = hd == hdv && hd.is_multiple_of(step) && (16..=2 * COOP_ATTN_MAX_HD).contains(&hd);
        (fits && (1..=rows).contains(&hg)).then(|| 1 << (rows / hg).ilog2())
    }

    /// The launch with parameters `params` on grid `groups` (the schedule's) as the f16
    /// cooperative-matrix attention, where the variant takes it and its head sizes suit it:
    /// its parameters (`tq` rewritten to `coop_attention_tq`'s) and grid (the tiles along z).
    pub fn coop_attention_launch(&self, params: &[u32; 16], groups: [u32; 3]) -> Option<([u32; 16], [u32; 3])> {
        use super::params::{AttentionTileParams, KernelParams};
        if self.kernel != Kernel::AttentionTile || !self.takes_coop_f16() {
            return None;
        }
        let mut p = AttentionTileParams::from_words(params);
        p.tq = Variant::coop_attention_tq(self.kv?, p.head_dim, p.head_dim_v, p.hg)?;
        let n = p.n.saturating_sub(p.t0).min(super::schedule::ATTN_TOKENS);
        Some((p.words(), [groups[0], groups[1], n.div_ceil(p.tq)]))
    }
}

/// Query rows (tokens × heads) per tile of the f16 cooperative-matrix attention, at most
/// (`attention_tile_coop16.wgsl`'s `TR`).
pub const COOP_ATTN_ROWS: u32 = 32;

/// The widest head the f16 cooperative-matrix attention takes in `COOP_ATTN_ROWS`-row tiles (its
/// `MAX_HD`); up to twice as wide in tiles of half the rows.
pub const COOP_ATTN_MAX_HD: u32 = 128;

/// Query rows per tile of the f16 cooperative-matrix attention at head size `hd`.
pub fn coop_attention_rows(hd: u32) -> u32 {
    match hd <= COOP_ATTN_MAX_HD {
        true => COOP_ATTN_ROWS,
        false => COOP_ATTN_ROWS / 2,
    }
}

/// Whether weights of `q` take the f16 cooperative-matrix tile: all but f32 and bf16.
pub fn coop_f16_weights(q: QType) -> bool {
    !matches!(q, QType::F32 | QType::BF16)
}

/// Rows and tokens per tile of the f16 cooperative-matrix matmul (`matmul_coop16.wgsl`).
pub const COOP_TILE: u32 = 64;

/// Invocations per workgroup of the f16 cooperative-matrix matmul: four subgroups of 32.
pub const COOP_THREADS: u32 = 128;

/// A launch as a tensor-core entry (`Variant::mma_launch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaLaunch {
    /// The entry's size (`Variant::mma_entry`).
    pub size: u32,
    pub grid: [u32; 3],
    pub threads: u32,
    /// The launch's parameters as the entry reads them.
    pub params: [u32; 16],
}

impl MmaLaunch {
    /// The matmul's tiles: `MMA_ROWS` rows × `size` tokens of its `rows` × `n`.
    pub fn tiles(&self) -> u32 {
        use super::params::{KernelParams, MatmulParams};
        let p = MatmulParams::from_words(&self.params);
        p.rows.div_ceil(MMA_ROWS) * p.n.div_ceil(self.size)
    }

    /// The most runs any tile of the matmul is cut into: 1 without stream-k, else the most
    /// blocks that share a tile (`cuda/matmul.cu`; its partial sums take that many slots of
    /// n × rows).
    pub fn runs(&self) -> u32 {
        use super::params::{KernelParams, MatmulParams};
        let p = MatmulParams::from_words(&self.params);
        if p.sk_workers == 0 {
            return 1;
        }
        let steps = p.k.div_ceil(MMA_STEP) as u64;
        let (work, g) = (p.sk_tiles as u64 * steps, p.sk_workers as u64);
        let owner = |j: u64| ((j + 1) * g).div_ceil(work) - 1;
        (0..p.sk_tiles as u64)
            .map(|t| owner(t * steps + steps - 1) - owner(t * steps) + 1)
            .max()
            .unwrap_or(1) as u32
    }
}

/// Weight rows per tile of the prefill matmul's tensor-core entries (`cuda/matmul.cu`).
pub const MMA_ROWS: u32 = 128;

/// Elements of k per step of the prefill matmul's tensor-core entries: four 32-element blocks
/// loaded into shared memory between two barriers.
pub const MMA_STEP: u32 = 128;

/// The token tile widths of the matmul's tensor-core entries, narrowest first: an entry each.
pub const MMA_COLS: [u32; 3] = [16, 32, 64];

/// The head sizes of the prefill attention's tensor-core entries (`cuda/attention_tile.cu`):
/// llama.cpp's, but for DeepSeek's 576.
pub const MMA_HEAD_DIMS: [u32; 6] = [64, 80, 96, 112, 128, 256];

/// Those for a q8_0 cache, whose heads are whole 32-element blocks.
pub const MMA_HEAD_DIMS_Q8_0: [u32; 4] = [64, 96, 128, 256];

/// Query rows (tokens × heads) per tile of the tensor-core attention at head size `hd`: 64,
/// and 32 above 128, where two warps share each warp's rows (`cuda/attention_tile.cu`).
pub fn mma_attention_rows(hd: u32) -> u32 {
    if hd > 128 {
        32
    } else {
        64
    }
}

/// Blocks of a tensor-core matmul an SM holds, the places stream-k shares tiles out over: two
/// of 256 threads (what `__launch_bounds__` asks to be resident), the quarter of an SM whose
/// loads in flight keep its share of memory busy.
pub const MMA_BLOCKS_PER_SM: u32 = 2;

/// Every variant: each op with each type it takes, and on wgpu both reduction paths.
/// The naga test validates and translates all of them; the NVRTC test compiles their CUDA twins.
pub fn all_variants() -> Vec<Variant> {
    let mut out = Vec::new();
    for k in Kernel::ALL {
        let base: Vec<Variant> = match k.info().spec {
            Spec::Act => ACT_QTYPES.into_iter().map(|q| Variant::with_qtype(k, q)).collect(),
            Spec::Matrix => WEIGHT_QTYPES.into_iter().map(|q| Variant::with_qtype(k, q)).collect(),
            Spec::Vector => VECTOR_QTYPES.into_iter().map(|q| Variant::with_qtype(k, q)).collect(),
            Spec::Kv => [KvType::F32, KvType::F16, KvType::Q8_0]
                .into_iter()
                .map(|kv| Variant::with_kv(k, kv))
                .collect(),
            Spec::None => vec![Variant::new(k)],
        };
        for v in base {
            out.push(v);
            if k.reduces() {
                out.push(v.subgroups(true));
            }
        }
    }
    out
}

/// Head widths the attention kernel takes: q is held in workgroup memory, and each of the 64
/// invocations accumulates up to 8 output dimensions.
pub const MAX_HEAD_DIM: usize = 512;

fn refuse(s: String) -> Result<(), Refusal> {
    Err(Refusal(s))
}

/// The part of the gate that depends on the context: the kernels index a layer's K or V cache
/// with 32-bit arithmetic (elements, words and bytes alike), so a layer of `n_ctx` positions
/// must stay under 4 GiB: past that (an f32 cache of 128k positions × 8k KV width, say) the
/// indices would wrap, and the backend refuses instead.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub fn check_context(model: &Model, n_ctx: usize, kv: KvType, backend: &str) -> Result<(), Refusal> {
    let (kw, vw) = model.hparams.max_kv_widths();
    let row = kv.row_bytes(kw.max(vw)) as u64;
    let bytes = (n_ctx as u64).saturating_mul(row);
    if bytes > u32::MAX as u64 {
        return refuse(format!(
            "a {} KV cache layer of {n_ctx} positions × {} elements is {bytes} bytes, past the {backend} kernels' 32-bit indexing (at most {} positions)",
            kv.name(),
            kw.max(vw),
            u32::MAX as u64 / row.max(1)
        ));
    }
    Ok(())
}

/// The part of the gate every GPU backend shares: each weight the graph reads has a kernel for
/// its qtype and a row length the kernel takes, each op's shape is one the kernels handle.
/// `backend` names the backend in the refusal.
/// Experts `moe_route` chooses among, at most (its bit set of 16 words).
const MAX_EXPERTS: usize = 512;

pub fn check_graph(model: &Model, graph: &Graph, kv: KvType, backend: &str) -> Result<(), Refusal> {
    let hp = &model.hparams;
    // The heads (n_head_kv, head_dim, head_dim_v) of each layer whose attention writes its own
    // cache, so far in graph order: a KV-shared layer reads one of them, at those widths.
    let mut writes: HashMap<usize, (usize, usize, usize)> = HashMap::new();
    let mut seen = HashSet::new();
    for node in &graph.nodes {
        for name in node.op.weights() {
            if !seen.insert(name.to_string()) {
                continue;
            }
            let t = model
                .weights
                .get(name.as_ref())
                .ok_or_else(|| Refusal(format!("{name} is missing")))?;
            if !has_weight_kernel(t.qtype) {
                return refuse(format!("{name} is {}, no {backend} kernel", t.qtype));
            }
            let k = t.row_len();
            let need = match node.op {
                Op::Matmul { .. } => 32,
                Op::GetRows { .. } => 8,
                _ => 1,
            };
            if k % need != 0 {
                return refuse(format!("{name}: row length {k} is not a multiple of {need}"));
            }
        }
        if let Op::Attention { attn, .. } = node.op {
            let heads = (attn.n_head_kv, attn.head_dim, attn.head_dim_v);
            // Each layer's cache is sized by `HParams::kv_widths`: the node must match it.
            let (kw, vw) = hp.kv_widths(attn.kv_from.unwrap_or(attn.layer));
            if attn.layer >= hp.n_layer || (kw, vw) != (heads.0 * heads.1, heads.0 * heads.2) {
                return refuse(format!(
                    "{}: K/V rows of {}/{} for a cache of {kw}/{vw}",
                    node.name,
                    heads.0 * heads.1,
                    heads.0 * heads.2
                ));
            }
            match attn.kv_from {
                None => {
                    writes.insert(attn.layer, heads);
                }
                Some(src) if writes.get(&src) == Some(&heads) => {}
                Some(src) => {
                    return refuse(format!(
                        "{}: reads the KV cache of layer {src}, which no earlier layer writes with {} heads of {}/{}",
                        node.name, heads.0, heads.1, heads.2
                    ));
                }
            }
        }
        match node.op {
            // The BERT kernels read f32 vectors and tables (what llama.cpp's converter and
            // sentence-transformers checkpoints store them as).
            Op::LayerNorm {
                ref weight, ref bias, ..
            } => {
                for w in [weight, bias] {
                    let q = model.weights.get(w.as_str()).map(|t| t.qtype);
                    if q != Some(QType::F32) {
                        return refuse(format!(
                            "{w}: the {backend} layer_norm takes f32 weights, not {}",
                            q.map_or("missing", QType::name)
                        ));
                    }
                }
            }
            Op::AddPosRows { ref weight, .. } => {
                let q = model.weights.get(weight.as_str()).map(|t| t.qtype);
                if q != Some(QType::F32) {
                    return refuse(format!(
                        "{weight}: the {backend} add_pos_rows takes an f32 table, not {}",
                        q.map_or("missing", QType::name)
                    ));
                }
            }
            Op::Attention {
                attn:
                    Attn {
                        n_head,
                        n_head_kv,
                        head_dim,
                        head_dim_v,
                        ..
                    },
                ..
            } => {
                // q8_0 rows are stored two blocks (17 words) per invocation.
                let (kw, vw) = (n_head_kv * head_dim, n_head_kv * head_dim_v);
                if kv == KvType::Q8_0 && (head_dim % 32 != 0 || head_dim_v % 32 != 0 || kw % 64 != 0 || vw % 64 != 0) {
                    return refuse(format!(
                        "{}: a q8_0 KV cache needs heads in 32s and K/V rows in 64s (head_dim {head_dim}/{head_dim_v}, rows {kw}/{vw})",
                        node.name
                    ));
                }
                if head_dim % 2 != 0 || head_dim > MAX_HEAD_DIM || head_dim_v > MAX_HEAD_DIM {
                    return refuse(format!(
                        "{}: head_dim {head_dim}/{head_dim_v} (the kernel takes even widths up to {MAX_HEAD_DIM})",
                        node.name
                    ));
                }
                if n_head_kv == 0 || n_head % n_head_kv != 0 {
                    return refuse(format!("{}: {n_head} heads over {n_head_kv} KV heads", node.name));
                }
            }
            Op::Rope { head_dim, rope, .. } if rope.n_rot % 2 != 0 || rope.n_rot > head_dim => {
                return refuse(format!("{}: n_rot {} of head_dim {head_dim}", node.name, rope.n_rot));
            }
            // The temperature rides in the cos/sin table, which the unrotated dims never read.
            Op::Rope { head_dim, rope, .. } if rope.temp.is_some() && rope.n_rot != head_dim => {
                return refuse(format!(
                    "{}: attention temperature with n_rot {} of head_dim {head_dim}",
                    node.name, rope.n_rot
                ));
            }
            Op::HeadNorm { head_dim, .. } if head_dim == 0 || node.width % head_dim != 0 => {
                return refuse(format!(
                    "{}: width {} is not whole heads of {head_dim}",
                    node.name, node.width
                ));
            }
            Op::MoeRoute { logits, k, .. } if graph.nodes[logits].width > MAX_EXPERTS || k == 0 => {
                return refuse(format!(
                    "{}: {k} of {} experts (the kernel routes up to {MAX_EXPERTS})",
                    node.name, graph.nodes[logits].width
                ));
            }
            Op::MatmulId { .. } if node.rows * graph.nodes[node.op.inputs()[1]].width / 2 > 65_535 => {
                return refuse(format!(
                    "{}: more than 65535 (token, expert) pairs in a step",
                    node.name
                ));
            }
            Op::HeadNormPlain { head_dim, .. } if head_dim == 0 || node.width % head_dim != 0 => {
                return refuse(format!(
                    "{}: width {} is not whole heads of {head_dim}",
                    node.name, node.width
                ));
            }
            Op::Slice { x, col0 } if node.width == 0 || col0 + node.width > graph.nodes[x].width => {
                return refuse(format!(
                    "{}: columns {col0}..{} of a row of {}",
                    node.name,
                    col0 + node.width,
                    graph.nodes[x].width
                ));
            }
            Op::ScaleBy { ref weight, .. } => {
                let n = model.weights.get(weight.as_str()).map_or(0, |t| t.n_elements());
                if n != 1 {
                    return refuse(format!("{weight}: {n} values for one scale"));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::gpu::params::{AttentionTileParams, KernelParams};
    use crate::backend::gpu::schedule::ATTN_TOKENS;

    /// The tensor-core attention takes every head size it has an entry for (per cache type), in
    /// tiles of the widest power of two of tokens whose rows fit its tile, and leaves the rest
    /// (other sizes, head_dim ≠ head_dim_v, more heads a workgroup than a tile has rows, an f32
    /// cache) to the f32 tile.
    /// The f16 cooperative-matrix attention takes an f16 cache's heads of multiples of 16 up
    /// to 128 in 32-row tiles and of 64 up to 256 in 16-row ones (a q8_0 cache's of whole
    /// blocks: 32 and 128), a power of two of tokens of `hg` heads within them; other sizes, K
    /// and V heads of different widths, more heads than rows and an f32 cache keep the scalar
    /// tile, whose launch it then leaves alone.
    #[test]
    fn the_cooperative_matrix_attention_takes_its_head_sizes_in_whole_tiles() {
        use super::super::params::{AttentionTileParams, KernelParams};
        use KvType::{F16, Q8_0};
        let cases = [
            (F16, 16, 1, 32),
            (F16, 64, 2, 16),
            (F16, 80, 3, 8),
            (F16, 128, 32, 1),
            (F16, 192, 1, 16),
            (F16, 256, 4, 4),
            (Q8_0, 32, 1, 32),
            (Q8_0, 96, 2, 16),
            (Q8_0, 256, 1, 16),
        ];
        for (kv, hd, hg, tq) in cases {
            assert_eq!(
                Variant::coop_attention_tq(kv, hd, hd, hg),
                Some(tq),
                "{kv:?} {hd} × {hg}"
            );
        }
        let refused = [
            (F16, 8, 8, 1),
            (F16, 72, 72, 1),
            (F16, 144, 144, 1),
            (F16, 320, 320, 1),
            (F16, 512, 512, 1),
            (F16, 128, 64, 1),
            (F16, 128, 128, 33),
            (F16, 256, 256, 17),
            (Q8_0, 16, 16, 1),
            (Q8_0, 80, 80, 1),
            (Q8_0, 192, 192, 1),
        ];
        for (kv, hd, hdv, hg) in refused {
            assert_eq!(
                Variant::coop_attention_tq(kv, hd, hdv, hg),
                None,
                "{kv:?} {hd}/{hdv} × {hg}"
            );
        }
        let p = AttentionTileParams {
            head_dim: 128,
            head_dim_v: 128,
            hg: 2,
            tq: 4,
            n: 300,
            t0: 0,
            ..Default::default()
        };
        for kv in [F16, Q8_0] {
            let v = Variant::with_kv(Kernel::AttentionTile, kv);
            let (words, grid) = v.coop_attention_launch(&p.words(), [8, 3, 75]).unwrap();
            assert_eq!(AttentionTileParams::from_words(&words).tq, 16);
            // The first launch of ATTN_TOKENS (256) of the 300 tokens, 16 a tile.
            assert_eq!(grid, [8, 3, 16]);
        }
        let f32 = Variant::with_kv(Kernel::AttentionTile, KvType::F32);
        assert_eq!(f32.coop_attention_launch(&p.words(), [8, 3, 75]), None);
        let f16 = Variant::with_kv(Kernel::AttentionTile, F16);
        let odd = AttentionTileParams {
            head_dim: 136,
            head_dim_v: 136,
            ..p
        };
        assert_eq!(f16.coop_attention_launch(&odd.words(), [8, 3, 75]), None);
    }

    #[test]
    fn the_tensor_core_attention_takes_its_head_sizes_in_whole_tiles() {
        for (kv, sizes) in [
            (KvType::F16, &MMA_HEAD_DIMS[..]),
            (KvType::Q8_0, &MMA_HEAD_DIMS_Q8_0[..]),
        ] {
            sizes_take_whole_tiles(Variant::with_kv(Kernel::AttentionTile, kv), sizes);
        }
        assert!(!Variant::with_kv(Kernel::AttentionTile, KvType::F32).has_mma());
    }

    /// Stream-k takes the tiles past the last whole round where their share is at most three
    /// quarters of a tile, and its blocks, cutting as `cuda/matmul.cu` cuts (replayed here),
    /// cover every step of those tiles once, in runs of consecutive steps numbered from 0 in
    /// each tile, at most `MmaLaunch::runs` a tile.
    #[test]
    fn stream_k_shares_cover_each_step_once() {
        use super::super::params::{KernelParams, MatmulParams};
        // (tiles, k, SMs): a 7B FFN at 512 tokens on an H200; 4,096² there (a near-full round);
        // one step a tile; tiles between the SMs and the places; whole rounds; 4,096² at 32 tokens
        // on an H200; one step a tile again; fewer tiles than SMs.
        assert_eq!(Variant::mma_stream_k(688, 4096, 132), Some((160, 264)));
        assert_eq!(Variant::mma_stream_k(256, 4096, 132), None);
        assert_eq!(Variant::mma_stream_k(45, 128, 16), None);
        assert_eq!(Variant::mma_stream_k(20, 1056, 16), Some((20, 32)));
        assert_eq!(Variant::mma_stream_k(528, 4096, 132), None);
        assert_eq!(Variant::mma_stream_k(64, 4096, 132), Some((64, 264)));
        assert_eq!(Variant::mma_stream_k(8, 96, 132), None);
        assert_eq!(Variant::mma_stream_k(15, 4096, 16), Some((15, 32)));
        let v = Variant::with_qtype(Kernel::Matmul, QType::Q4K);
        for (rows, n, k, sms) in [
            (11008, 512, 4096, 132),
            (4096, 32, 4096, 132),
            (1024, 16, 4096, 132),
            (520, 520, 1024, 16),
            (520, 200, 1056, 16),
            (640, 520, 256, 16),
        ] {
            let p = MatmulParams {
                k,
                rows,
                n,
                ..Default::default()
            };
            let l = v.mma_launch(&p.words(), [1, 1, 1], sms).unwrap();
            let q = MatmulParams::from_words(&l.params);
            let what = format!("{rows} × {n}, k {k}, {sms} SMs");
            assert!(q.sk_workers > 0, "{what}: no stream-k");
            let steps = k.div_ceil(MMA_STEP);
            let dp = l.tiles() - q.sk_tiles;
            assert_eq!(l.grid, [dp + q.sk_workers, 1, 1], "{what}");
            let (work, g) = (q.sk_tiles * steps, q.sk_workers);
            let owner = |j: u32| ((j + 1) * g).div_ceil(work) - 1;
            // seen[t][s]: the run (block) that took step s of stream-k tile t.
            let mut seen = vec![vec![None; steps as usize]; q.sk_tiles as usize];
            for wk in 0..g {
                let (mut i, e) = (wk * work / g, (wk + 1) * work / g);
                while i < e {
                    let (t, s0) = (i / steps, i % steps);
                    let s1 = steps.min(s0 + (e - i));
                    let run = wk - owner(t * steps);
                    for s in s0..s1 {
                        assert_eq!(
                            seen[t as usize][s as usize].replace(run),
                            None,
                            "{what}: step {s} of {t} twice"
                        );
                    }
                    i += s1 - s0;
                }
            }
            for (t, runs) in seen.iter().enumerate() {
                let runs: Vec<u32> = runs
                    .iter()
                    .map(|r| r.unwrap_or_else(|| panic!("{what}: a step of {t} left")))
                    .collect();
                assert!(
                    runs.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1),
                    "{what}: {runs:?}"
                );
                let t = t as u32;
                let nrun = owner(t * steps + steps - 1) - owner(t * steps) + 1;
                assert_eq!((runs[0], runs[runs.len() - 1] + 1), (0, nrun), "{what}: tile {t}");
                assert!(nrun <= l.runs(), "{what}");
            }
        }
    }

    fn sizes_take_whole_tiles(v: Variant, sizes: &[u32]) {
        for hd in [32, 64, 80, 96, 112, 128, 192, 256] {
            for hg in [1, 3, 8, 32, 64] {
                for hdv in [hd, 128] {
                    let p = AttentionTileParams {
                        n_head: 64,
                        n_head_kv: 64 / hg,
                        head_dim: hd,
                        head_dim_v: hdv,
                        n: 300,
                        n_split: 2,
                        hg,
                        tq: 1,
                        kt: 16,
                        ..Default::default()
                    };
                    let launch = v.mma_launch(&p.words(), [64 / hg, 2, 300], 132);
                    let rows = mma_attention_rows(hd);
                    let what = format!("head {hd} / {hdv}, {hg} heads a workgroup");
                    if hd != hdv || !sizes.contains(&hd) || hg > rows {
                        assert_eq!(launch, None, "{what}");
                        continue;
                    }
                    let l = launch.unwrap_or_else(|| panic!("{what}: no tensor-core launch"));
                    let tq = AttentionTileParams::from_words(&l.params).tq;
                    assert!(
                        tq.is_power_of_two() && tq * hg <= rows && 2 * tq * hg > rows,
                        "{what}: {tq} tokens"
                    );
                    assert_eq!(l.grid, [64 / hg, 2, ATTN_TOKENS.div_ceil(tq)], "{what}");
                    let kv = v.kv.map(|k| k.name());
                    assert_eq!(
                        v.mma_entry(l.size),
                        Some(format!("attention_tile_mma{hd}_kv_{}", kv.unwrap()))
                    );
                }
            }
        }
    }
}
