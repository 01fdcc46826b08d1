//! The wgpu backend: WGSL kernels (`shaders/`) that read the raw GGUF blocks, on any adapter
//! wgpu reaches (Vulkan, Metal, DX12).
//!
//! - `instance` — the wgpu instance, without window-system extensions (no presentation noise)
//! - `device`   — adapter choice, the shared device, error scopes, pipelines (+ disk cache)
//! - `shaders`  — the WGSL sources and how kernel variants are assembled from them
//! - `weights`  — weights uploaded once, raw, split by rows past the binding limit
//! - `plan`     — a schedule made concrete once per shape: buffers, params, bind groups
//! - `context`  — the KV cache and the forward (one command buffer, one submit)
//! - `profile`  — per-op GPU time from timestamp queries (`BackendOptions::profile`)
//!
//! Numerics: a matmul over quantized weights first rounds its input to the 8-bit format the
//! CPU pairs with the weight type (`quantize_act`: q8_0, q8_1 or q8_K, bit for bit as the CPU
//! rounds it), then multiplies the rounded values by the weights dequantized inside the dot
//! products, so each product equals the CPU's integer dot product to f32 summation order
//! (NMSE ~1e-14). Everything else is f32, rounding exactly where the CPU does: attention (q and
//! the probabilities to f16 with an f16 cache, q to q8_0 with a q8_0 cache; flash or non-flash
//! order), RoPE through the CPU's own cos/sin table, GELU through its f16 table. On f32 weights
//! the backends agree to f32 rounding (NMSE ~1e-8 on whole models). On quantized models the
//! remaining last-bit differences (summation orders) occasionally tip an 8-bit rounding, and
//! those jumps grow through the layers: real models' logits end about NMSE 1e-3 from the CPU's,
//! as far as the CPU's own scalar kernels end from its SIMD ones.
//!
//! Portability: no optional feature is needed. f16 values are decoded and encoded with integer
//! arithmetic (wgpu allows `unpack2x16float` only with `DownlevelFlags::SHADER_F16_IN_F32`,
//! which Mesa's Vulkan drivers lack without shader-f16); int8 lanes use `unpack4xI8`/`unpack4xU8`;
//! subgroup reductions are a variant taken only where the adapter has subgroups of ≥ 8 lanes
//! (on Metal, whose reported minimum is always 4, where a probe kernel ran with ≥ 8).
//!
//! Adding an op: the recipe in `backend`'s module header; on the wgpu side it is one WGSL file
//! (`shaders/<op>.wgsl`) named by the kernel's table row, nothing in this module.

mod context;
pub mod device;
mod instance;
mod plan;
mod profile;
pub mod shaders;
pub mod weights;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Backend, Context, KvType, Progress, Refusal};
use crate::backend::gpu::shape::DeviceShape;
use crate::error::{Error, Result};
use crate::model::{Graph, Model};
use context::WgpuContext;
use device::Gpu;
use shaders::Coop;
use weights::WgpuWeights;

#[derive(Clone, Debug)]
pub struct WgpuOptions {
    /// Take a software adapter (llvmpipe, WARP) when there is no GPU.
    pub allow_software: bool,
    /// Use subgroup reductions where the adapter has them.
    pub subgroups: bool,
    /// Split weights (by rows) and forwards (by tokens) at this many bytes per binding instead
    /// of the adapter's limit; tests use a small value to exercise both splits everywhere.
    pub max_binding: Option<u64>,
    /// Keep wgpu's runtime checks in every shader (indices clamped to their bindings, loops
    /// bounded). Off by default: the kernels keep their indices within their bindings (the
    /// tests run them unchecked, and compare them with the checked build), so the checks would
    /// only cost time where the platform has no robust buffer access of its own (Metal, DX12).
    pub checked: bool,
    /// Matmuls over quantized weights (decode rows and prefill tiles) multiply 8-bit
    /// activations by the weights' integers (`dot4I8Packed`, llama.cpp's MMVQ and MMQ); off,
    /// they multiply the dequantized weights by the same activations in f32. On by default.
    pub int8_matmul: bool,
    /// The prefill matmul multiplies on cooperative matrices where the device offers them, its
    /// subgroups are 32 wide and a probe saw them multiply correctly: 16 × 16 f16 ones with f32
    /// accumulators (`matmul_coop16.wgsl`: the tensor cores as Vulkan offers them), else 8 × 8
    /// f32 ones (`matmul_coop.wgsl`: Metal's simdgroup matrices); on the f16 ones the prefill
    /// attention too (`attention_tile_coop16.wgsl`). On by default.
    pub coop_matmul: bool,
}

impl WgpuOptions {
    /// Under `--backend auto`: hardware adapters only (`BackendOptions::wgpu_allow_software`,
    /// `MINFER_WGPU_ALLOW_CPU=1`, lets `candidates` allow software ones).
    pub fn auto() -> WgpuOptions {
        WgpuOptions {
            allow_software: false,
            subgroups: true,
            max_binding: None,
            checked: false,
            int8_matmul: true,
            coop_matmul: true,
        }
    }

    /// Under `--backend wgpu`: whatever adapter there is.
    pub fn forced() -> WgpuOptions {
        WgpuOptions {
            allow_software: true,
            ..WgpuOptions::auto()
        }
    }
}

pub struct WgpuBackend {
    gpu: Arc<Gpu>,
    opts: WgpuOptions,
    uploaded: AtomicU64,
    /// Contexts time each op with timestamp queries (`Context::profile_report`).
    profile: bool,
    progress: Option<Progress>,
    /// Steps whose context reaches this many positions take the split-KV attention (by
    /// default the device's, `schedule::split_span`).
    split_span: u32,
    /// The device as the schedule sees it (`Gpu::shape`, or compute units given).
    shape: DeviceShape,
    /// Where the device has no cooperative matrices, the prefill matmul takes the f16 tile on
    /// their scalar emulation (`with_coop_emulation`).
    coop_emulated: bool,
}

impl WgpuBackend {
    /// The backend on this machine's best adapter, or why not: no adapter, or a software
    /// adapter that `opts` does not allow.
    pub fn new(opts: WgpuOptions) -> std::result::Result<WgpuBackend, Refusal> {
        let a = device::adapter().map_err(Refusal)?;
        if a.software && !opts.allow_software {
            return Err(Refusal(format!(
                "software adapter {} ({}) is not auto-selected (--backend wgpu or MINFER_WGPU_ALLOW_CPU=1 forces it)",
                a.name, a.backend
            )));
        }
        let gpu = device::gpu().map_err(Refusal)?;
        let split_span = crate::backend::gpu::schedule::split_span(gpu.shape.sms);
        let shape = gpu.shape;
        Ok(WgpuBackend {
            gpu,
            shape,
            opts,
            uploaded: AtomicU64::new(0),
            profile: false,
            progress: None,
            split_span,
            coop_emulated: false,
        })
    }

    /// Contexts made from now on take the split-KV attention in steps whose context
    /// reaches `span` positions (0: never).
    pub fn with_split_span(mut self, span: u32) -> WgpuBackend {
        self.split_span = span;
        self
    }

    /// Contexts made from now on size their launches for `n` compute units (wgpu reports none:
    /// `Gpu::shape` guesses them from the adapter's name and kind).
    pub fn with_compute_units(mut self, n: u32) -> WgpuBackend {
        self.shape.sms = n.max(1);
        self
    }

    /// Contexts made from now on take the f16 cooperative-matrix tile (`Coop::F16x16Emulated`)
    /// where the device has no cooperative matrices but has f16 shaders: the tile's own code
    /// with its matrix operations in scalar code, slow, for testing it anywhere.
    #[doc(hidden)]
    pub fn with_coop_emulation(mut self) -> WgpuBackend {
        self.coop_emulated = true;
        self
    }

    /// The device as the schedule sees it (`with_compute_units` changes its SMs).
    pub fn shape(&self) -> DeviceShape {
        self.shape
    }

    /// What WGSL probe `src` counts (one workgroup; binding 0 one counter from 0), or why it
    /// could not run (a shader the device refused).
    #[doc(hidden)]
    pub fn run_probe(&self, label: &str, src: &str) -> std::result::Result<u32, String> {
        self.gpu
            .scoped(label, || device::run_probe(&self.gpu, label, src, 1, 0))?
    }

    /// Contexts made from now on time each op (where the adapter has timestamp queries).
    pub fn with_profile(mut self, on: bool) -> WgpuBackend {
        self.profile = on;
        self
    }

    /// Contexts made from now on report their weight upload to `progress`.
    pub fn with_progress(mut self, progress: Option<Progress>) -> WgpuBackend {
        self.progress = progress;
        self
    }

    /// Bytes of weights uploaded by this backend's contexts so far.
    pub fn uploaded_bytes(&self) -> u64 {
        self.uploaded.load(Ordering::Relaxed)
    }

    /// Whether kernels take the subgroup path on this device: it needs the feature, and
    /// subgroups of at least 8 lanes (a `matmul_vec` row segment lives in one subgroup;
    /// `Gpu::subgroups_usable`).
    pub fn uses_subgroups(&self) -> bool {
        self.opts.subgroups && self.gpu.subgroups_usable()
    }

    /// The cooperative matrices the prefill matmul multiplies on here (`WgpuOptions::coop_matmul`,
    /// and `Gpu::coop`: the device has them and they passed a probe; or their emulation).
    pub fn uses_coop(&self) -> Coop {
        let emulated = self.coop_emulated
            && self.gpu.has(wgpu::Features::SHADER_F16)
            && self.gpu.limits.max_compute_workgroup_storage_size >= shaders::COOP16_SHARED_BYTES;
        match (self.opts.coop_matmul, self.gpu.coop) {
            (false, _) => Coop::Off,
            (true, Coop::Off) if emulated => Coop::F16x16Emulated,
            (true, c) => c,
        }
    }

    /// The smallest subgroup size a kernel of ours ran with on this device, where it has
    /// subgroups.
    pub fn subgroup_seen(&self) -> Option<u32> {
        self.gpu.subgroup_seen
    }

    fn max_binding(&self) -> u64 {
        let hw = self.gpu.max_binding();
        self.opts.max_binding.map_or(hw, |m| m.min(hw))
    }
}

fn refuse(s: String) -> std::result::Result<(), Refusal> {
    Err(Refusal(s))
}

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn describe(&self) -> String {
        format!("wgpu ({})", self.gpu.describe())
    }

    fn check_context(&self, model: &Model, n_ctx: usize, kv: KvType) -> std::result::Result<(), Refusal> {
        crate::backend::gpu::kernels::check_context(model, n_ctx, kv, "wgpu")
    }

    fn check(&self, model: &Model, graph: &Graph, kv: KvType) -> std::result::Result<(), Refusal> {
        let max = self.max_binding();
        // Every weight is uploaded (raw), so every weight must fit its bindings.
        let mut all: Vec<_> = model.weights.values().collect();
        all.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        for t in all {
            if let Err(e) = weights::split_rows(t.row_bytes() as u64, t.n_rows() as u64, max) {
                return refuse(format!("{}: {e}", t.name));
            }
        }
        crate::backend::gpu::kernels::check_graph(model, graph, kv, "wgpu")?;
        // The expert matmul reads an expert's rows from one binding.
        for node in &graph.nodes {
            if let crate::model::Op::MatmulId { weight, .. } = &node.op {
                if let Some(t) = model.weights.get(weight) {
                    let parts =
                        weights::split_rows(t.row_bytes() as u64, t.n_rows() as u64, max).map_or(0, |p| p.len());
                    if parts != 1 {
                        return refuse(format!(
                            "{weight}: {} bytes of experts exceed one {max}-byte binding",
                            t.data.len()
                        ));
                    }
                }
            }
        }
        let hw = self.gpu.max_binding();
        for node in &graph.nodes {
            if (node.rows * node.width * 4) as u64 > hw {
                return refuse(format!(
                    "{}: {} activations exceed the {hw}-byte binding limit",
                    node.name, node.width
                ));
            }
        }
        Ok(())
    }

    fn new_context(&self, model: &Arc<Model>, n_cells: usize, kv: KvType) -> Result<Box<dyn Context>> {
        let gpu = self.gpu.clone();
        let err = |what: String| Error::Backend { backend: "wgpu", what };
        let (kc, vc, kv_bytes) = WgpuContext::alloc_kv(&gpu, model, n_cells, kv)?;
        let weights = WgpuWeights::upload(&gpu, model, self.max_binding(), self.progress.as_ref()).map_err(err)?;
        self.uploaded.fetch_add(weights.resident, Ordering::Relaxed);
        // A one-sequence step of the whole context: the header, (pos, off) per token, the cells.
        let step_words = 4 + 2 + n_cells;
        let step = gpu
            .scoped("step buffer", || WgpuContext::alloc_step(&gpu, step_words))
            .map_err(err)?;
        let (profiler, profile_note) = match self.profile.then(|| profile::Profiler::new(&gpu)) {
            Some(Ok(p)) => (Some(p), None),
            Some(Err(why)) => (None, Some(why)),
            None => (None, None),
        };
        Ok(Box::new(WgpuContext {
            gpu,
            model: model.clone(),
            kv,
            n_cells,
            weights,
            kc,
            vc,
            kv_bytes,
            step,
            step_words,
            plans: HashMap::new(),
            graphs: HashMap::new(),
            subgroups: self.uses_subgroups(),
            checked: self.opts.checked,
            int8: self.opts.int8_matmul,
            coop: self.uses_coop(),
            max_binding: self.max_binding(),
            profiler,
            profile_note,
            rate: context::FIRST_RATE,
            submitted: Default::default(),
            split_span: self.split_span,
            shape: DeviceShape {
                coop_f16: self.uses_coop().is_f16(),
                ..self.shape
            },
        }))
    }
}
