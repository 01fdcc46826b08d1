//! The CUDA backend: the kernels of `cuda/` (CUDA C++ twins of `shaders/`, one file per op,
//! one header of per-qtype dequantization) compiled by NVRTC at first use for the device's
//! compute capability, run on the same schedule as the wgpu backend.
//!
//! - `device`  — what the backend needs of a device, and the kernels' one parameter block
//! - `driver`  — the CUDA driver (cudarc, loaded at run time: a build with this backend runs
//!   everywhere, and says why CUDA is out where it is)
//! - `emu`     — the same kernels compiled for the CPU against an emulation of CUDA's
//!   execution model, so tests run the whole backend without a GPU
//! - `source`  — the sources, NVRTC, the on-disk PTX cache
//! - `context` — weights, KV cache, plans, CUDA graphs for decode, readback
//!
//! Numerics are the wgpu backend's (matmul inputs rounded to the CPU's 8-bit activation formats
//! by `quantize_act`, weights dequantized in the dot products or taken as their integers: the
//! decode rows with dp4a (sm_61 on), the prefill tiles on the tensor cores (integer mma.sync,
//! sm_80 on); the CPU's rounding points in attention): the two GPU backends agree to f32
//! rounding.

mod context;
pub mod device;
mod driver;
pub mod emu;
pub mod source;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Backend, Context, KvType, Progress, Refusal};
use crate::error::{Error, Result};
use crate::model::{Graph, Model};
use context::CudaContext;
use device::Device;

pub struct CudaBackend {
    dev: Arc<dyn Device>,
    uploaded: AtomicU64,
    /// Contexts capture decode steps as CUDA graphs.
    graphs: bool,
    /// Contexts time each node's launches (`Context::profile_report`).
    profile: bool,
    progress: Option<Progress>,
    /// Steps whose context reaches this many positions take the split-KV attention (by
    /// default the device's, `schedule::split_span`).
    split_span: u32,
}

impl CudaBackend {
    /// CUDA device `ordinal` (`--gpu N`), or why not: no driver, no NVRTC, no such device.
    /// (`backend::candidates` also honours `BackendOptions::disable_cuda` and puts
    /// `cuda_emulator` in the device's place.)
    pub fn new(ordinal: usize) -> std::result::Result<CudaBackend, Refusal> {
        let d = driver::Driver::open(ordinal)?;
        Ok(CudaBackend::on(Arc::new(d)))
    }

    /// The backend on the CPU emulation of CUDA (a library built by [`emu::build`]), for work
    /// on the kernels without a GPU.
    pub fn emulated(lib: &Path) -> std::result::Result<CudaBackend, Refusal> {
        Ok(CudaBackend::on(Arc::new(emu::Emulator::load(lib).map_err(Refusal)?)))
    }

    fn on(dev: Arc<dyn Device>) -> CudaBackend {
        let split_span = crate::backend::gpu::schedule::split_span(dev.shape().sms);
        CudaBackend {
            dev,
            uploaded: AtomicU64::new(0),
            graphs: true,
            profile: false,
            progress: None,
            split_span,
        }
    }

    /// Contexts made from now on take the split-KV attention in steps whose context
    /// reaches `span` positions (0: never).
    pub fn with_split_span(mut self, span: u32) -> CudaBackend {
        self.split_span = span;
        self
    }

    /// Whether contexts made from now on time each node's launches on the device (events),
    /// for `Context::profile_report` and `decode_profile`; they then replay no graphs.
    pub fn with_profile(mut self, on: bool) -> CudaBackend {
        self.profile = on;
        self
    }

    /// Whether contexts made from now on replay decode steps as CUDA graphs (default on).
    pub fn with_graphs(mut self, on: bool) -> CudaBackend {
        self.graphs = on;
        self
    }

    /// Whether kernels are launched with programmatic dependent launch where the device has
    /// it (sm_90 and later; default on): each may start launching while the one before it
    /// finishes.
    pub fn with_pdl(self, on: bool) -> CudaBackend {
        self.dev.set_pdl(on);
        self
    }

    /// Whether the prefill matmul over quantized weights takes the tensor cores' integer
    /// products (`cuda/matmul.cu`'s matmul_mma) where the device has them (sm_80 and later;
    /// default on); off, its f32 tiles (`MINFER_INT8_MATMUL=0`). Set before any context.
    pub fn with_int8_matmul(self, on: bool) -> CudaBackend {
        self.dev.set_mma(on);
        self
    }

    /// Contexts made from now on report their weight upload to `progress`.
    pub fn with_progress(mut self, progress: Option<Progress>) -> CudaBackend {
        self.progress = progress;
        self
    }

    /// Bytes of weights uploaded by this backend's contexts so far.
    pub fn uploaded_bytes(&self) -> u64 {
        self.uploaded.load(Ordering::Relaxed)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn describe(&self) -> String {
        format!("cuda ({})", self.dev.describe())
    }

    fn check_context(&self, model: &Model, n_ctx: usize, kv: KvType) -> std::result::Result<(), Refusal> {
        crate::backend::gpu::kernels::check_context(model, n_ctx, kv, "cuda")
    }

    fn check(&self, model: &Model, graph: &Graph, kv: KvType) -> std::result::Result<(), Refusal> {
        crate::backend::gpu::kernels::check_graph(model, graph, kv, "cuda")?;
        if let Some(free) = self.dev.free_memory() {
            let need = model.weight_bytes();
            if need > free {
                return Err(Refusal(format!(
                    "{:.1} MB of weights, {:.1} MB of device memory free",
                    need as f64 / 1e6,
                    free as f64 / 1e6
                )));
            }
        }
        Ok(())
    }

    fn new_context(&self, model: &Arc<Model>, n_cells: usize, kv: KvType) -> Result<Box<dyn Context>> {
        if n_cells == 0 {
            return Err(Error::InvalidArgument("KV storage of 0 cells".into()));
        }
        let ctx = CudaContext::new(
            self.dev.clone(),
            model,
            n_cells,
            kv,
            (self.graphs, self.profile, self.split_span),
            self.progress.as_ref(),
        )?;
        self.uploaded.fetch_add(ctx.resident_bytes(), Ordering::Relaxed);
        Ok(Box::new(ctx))
    }
}
