//! The all-or-nothing gate: the backends a run may take, in order (`candidates`), each one's
//! verdict on a model (`verdicts`), and the choice of the first that takes all of it
//! (`select`), before anything is uploaded.

use std::sync::Arc;

#[cfg(feature = "cuda")]
use super::cuda;
#[cfg(feature = "wgpu")]
use super::wgpu;
use super::{cpu, Backend, KvType, Progress, Refusal};
use crate::error::{Error, Result};
#[cfg(feature = "wgpu")]
use crate::model::Graph;
use crate::model::{GraphKey, Model};

/// How `candidates` sets up the backends it makes, beyond the choice, threads and device.
/// `Default` is the built-in behaviour; `Overrides::backend_options` (`crate::overrides`)
/// applies the environment's (`MINFER_*`).
#[derive(Clone, Debug)]
pub struct BackendOptions {
    /// CPU kernels by ISA name (`scalar`, `avx2`, `avx512`, `neon`); None = the best this CPU runs.
    pub cpu_isa: Option<String>,
    /// Leave wgpu out (its verdict says `disabled by MINFER_DISABLE_WGPU`).
    pub disable_wgpu: bool,
    /// Under `auto`, a software wgpu adapter (llvmpipe, WARP) may be picked too.
    pub wgpu_allow_software: bool,
    /// wgpu shaders keep wgpu's runtime bounds checks (`wgpu::WgpuOptions::checked`).
    pub checked_shaders: bool,
    /// Matmuls over quantized weights in 8-bit integers: wgpu's matvec rows and prefill tiles
    /// (`wgpu::WgpuOptions::int8_matmul`), CUDA's tensor-core prefill tiles
    /// (`cuda::CudaBackend::with_int8_matmul`).
    pub int8_matmul: bool,
    /// wgpu's prefill matmul on cooperative matrices where the device has them
    /// (`wgpu::WgpuOptions::coop_matmul`).
    pub coop_matmul: bool,
    /// Per-op time ([`Context::profile_report`], [`Context::decode_profile`]): wgpu from
    /// timestamp queries, CUDA from events around each node's launches (no graphs then), the
    /// CPU from its own clock, with the weight bytes each op reads.
    pub profile: bool,
    /// Leave CUDA out (its verdict says `disabled by MINFER_DISABLE_CUDA`).
    pub disable_cuda: bool,
    /// CUDA: the CPU emulation library (built by `cuda::emu::build`) in the device's place.
    pub cuda_emulator: Option<std::path::PathBuf>,
    /// CUDA: capture and replay decode steps as CUDA graphs.
    pub cuda_graphs: bool,
    /// CUDA: launch kernels with programmatic dependent launch where the device has it.
    pub cuda_pdl: bool,
    /// GPU steps whose context reaches this many positions take the split-KV attention
    /// (None: the device's, `gpu::schedule::split_span` of its SMs); 0 never.
    pub split_span: Option<u32>,
    /// Called while a GPU backend uploads weights.
    pub progress: Option<Progress>,
}

impl Default for BackendOptions {
    fn default() -> Self {
        BackendOptions {
            cpu_isa: None,
            disable_wgpu: false,
            wgpu_allow_software: false,
            checked_shaders: false,
            int8_matmul: true,
            coop_matmul: true,
            profile: false,
            disable_cuda: false,
            cuda_emulator: None,
            cuda_graphs: true,
            cuda_pdl: true,
            split_span: None,
            progress: None,
        }
    }
}

fn cpu_backend(threads: Option<usize>, opts: &BackendOptions) -> Result<cpu::CpuBackend> {
    match &opts.cpu_isa {
        Some(isa) => cpu::CpuBackend::with_isa(threads, isa),
        None => cpu::CpuBackend::new(threads),
    }
    .map(|b| b.with_profile(opts.profile))
}

/// The wgpu backend as `opts` has it: `auto` takes hardware adapters only unless
/// `wgpu_allow_software`; `--backend wgpu` (`auto == false`) takes whatever adapter there is.
#[cfg(feature = "wgpu")]
fn wgpu_backend(auto: bool, opts: &BackendOptions) -> std::result::Result<wgpu::WgpuBackend, Refusal> {
    if opts.disable_wgpu {
        return Err(Refusal("disabled by MINFER_DISABLE_WGPU".into()));
    }
    let w = if auto {
        wgpu::WgpuOptions {
            allow_software: opts.wgpu_allow_software,
            ..wgpu::WgpuOptions::auto()
        }
    } else {
        wgpu::WgpuOptions::forced()
    };
    let w = wgpu::WgpuOptions {
        checked: opts.checked_shaders,
        int8_matmul: opts.int8_matmul,
        coop_matmul: opts.coop_matmul,
        ..w
    };
    let b = wgpu::WgpuBackend::new(w)?
        .with_profile(opts.profile)
        .with_progress(opts.progress.clone());
    Ok(match opts.split_span {
        Some(span) => b.with_split_span(span),
        None => b,
    })
}

/// CUDA device `gpu` (or the emulator `opts` names), or why not.
#[cfg(feature = "cuda")]
fn cuda_backend(gpu: Option<usize>, opts: &BackendOptions) -> std::result::Result<cuda::CudaBackend, Refusal> {
    if opts.disable_cuda {
        return Err(Refusal("disabled by MINFER_DISABLE_CUDA".into()));
    }
    let b = match &opts.cuda_emulator {
        Some(lib) => cuda::CudaBackend::emulated(lib)?,
        None => cuda::CudaBackend::new(gpu.unwrap_or(0))?,
    };
    let b = b
        .with_graphs(opts.cuda_graphs)
        .with_pdl(opts.cuda_pdl)
        .with_int8_matmul(opts.int8_matmul)
        .with_profile(opts.profile)
        .with_progress(opts.progress.clone());
    Ok(match opts.split_span {
        Some(span) => b.with_split_span(span),
        None => b,
    })
}

/// Which backends the user allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    Auto,
    Cpu,
    Wgpu,
    Cuda,
}

impl BackendChoice {
    pub fn parse(s: &str) -> Result<BackendChoice> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "wgpu" => Ok(BackendChoice::Wgpu),
            "cuda" => Ok(BackendChoice::Cuda),
            _ => Err(Error::InvalidArgument(format!(
                "backend '{s}' (expected auto, cpu, wgpu or cuda)"
            ))),
        }
    }
}

/// The backends this build offers for `choice`, best first: CUDA (native), then wgpu, then
/// the CPU, which closes the list under `auto`: it runs every op and every qtype.
/// A wgpu adapter comes first under `auto` only if it is hardware (or `wgpu_allow_software`);
/// `wgpu` takes whatever adapter there is, software included. `gpu` is the CUDA device index
/// (`--gpu N`, default 0).
#[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
// Pushes that a CPU-only build compiles out leave one push after `Vec::new()`.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(clippy::vec_init_then_push))]
pub fn candidates(
    choice: BackendChoice,
    threads: Option<usize>,
    gpu: Option<usize>,
    opts: &BackendOptions,
) -> Result<Vec<Arc<dyn Backend>>> {
    match choice {
        BackendChoice::Auto => {
            let mut v: Vec<Arc<dyn Backend>> = Vec::new();
            #[cfg(feature = "cuda")]
            if let Ok(b) = cuda_backend(gpu, opts) {
                v.push(Arc::new(b));
            }
            #[cfg(feature = "wgpu")]
            if let Ok(b) = wgpu_backend(true, opts) {
                v.push(Arc::new(b));
            }
            v.push(Arc::new(cpu_backend(threads, opts)?));
            Ok(v)
        }
        BackendChoice::Cpu => Ok(vec![Arc::new(cpu_backend(threads, opts)?)]),
        #[cfg(feature = "wgpu")]
        BackendChoice::Wgpu => match wgpu_backend(false, opts) {
            Ok(b) => Ok(vec![Arc::new(b)]),
            Err(r) => Err(Error::Backend {
                backend: "wgpu",
                what: r.0,
            }),
        },
        #[cfg(not(feature = "wgpu"))]
        BackendChoice::Wgpu => Err(Error::Backend {
            backend: "wgpu",
            what: "not available in this build".into(),
        }),
        #[cfg(feature = "cuda")]
        BackendChoice::Cuda => match cuda_backend(gpu, opts) {
            Ok(b) => Ok(vec![Arc::new(b)]),
            Err(r) => Err(Error::Backend {
                backend: "cuda",
                what: r.0,
            }),
        },
        #[cfg(not(feature = "cuda"))]
        BackendChoice::Cuda => Err(Error::Backend {
            backend: "cuda",
            what: "not available in this build (built without the `cuda` feature)".into(),
        }),
    }
}

/// Every candidate's gate verdict on `model` (for `info`).
pub fn verdicts(model: &Model, kv: KvType, opts: &BackendOptions) -> Vec<(String, std::result::Result<(), Refusal>)> {
    let graph = model.graph(GraphKey::new(1, 1));
    let mut out = Vec::new();
    match candidates(BackendChoice::Cpu, None, None, opts) {
        Ok(cands) => {
            for b in cands {
                out.push((b.name().to_string(), b.check(model, &graph, kv)));
            }
        }
        Err(e) => out.push(("cpu".into(), Err(Refusal(e.to_string())))),
    }
    #[cfg(feature = "wgpu")]
    out.push(("wgpu".into(), wgpu_verdict(model, &graph, kv, opts)));
    #[cfg(not(feature = "wgpu"))]
    out.push(("wgpu".into(), Err(Refusal("not available in this build".into()))));
    #[cfg(feature = "cuda")]
    out.push((
        "cuda".into(),
        cuda_backend(None, opts).and_then(|b| b.check(model, &graph, kv)),
    ));
    #[cfg(not(feature = "cuda"))]
    out.push((
        "cuda".into(),
        Err(Refusal(
            "not available in this build (built without the `cuda` feature)".into(),
        )),
    ));
    out
}

/// The wgpu verdict as `auto` sees it; a software adapter that `auto` skips is also checked
/// the way `--backend wgpu` would take it.
#[cfg(feature = "wgpu")]
fn wgpu_verdict(model: &Model, graph: &Graph, kv: KvType, opts: &BackendOptions) -> std::result::Result<(), Refusal> {
    match wgpu_backend(true, opts) {
        Ok(b) => b.check(model, graph, kv),
        Err(r) if r.0.starts_with("software") => match wgpu_backend(false, opts) {
            Ok(b) => match b.check(model, graph, kv) {
                Ok(()) => Err(Refusal(format!("{r}; forced, it takes the model"))),
                Err(why) => Err(Refusal(format!("{r}; forced, it would refuse: {why}"))),
            },
            Err(_) => Err(r),
        },
        Err(r) => Err(r),
    }
}

/// Runs the gate over the candidates, once, before anything is uploaded; the first that takes
/// the whole model, with a cache of up to `n_ctx` positions, wins. Returns it and the log lines
/// saying what was decided and why.
pub fn select(
    cands: Vec<Arc<dyn Backend>>,
    model: &Model,
    kv: KvType,
    n_ctx: usize,
) -> Result<(Arc<dyn Backend>, Vec<String>)> {
    let graph = model.graph(GraphKey::new(1, 1));
    let mut log = Vec::new();
    let mut last = None;
    for b in cands {
        match b
            .check(model, &graph, kv)
            .and_then(|()| b.check_context(model, n_ctx, kv))
        {
            Ok(()) => {
                log.push(format!(
                    "backend: {} — {}/{} weights, {:.1} MB",
                    b.describe(),
                    model.weights.len(),
                    model.weights.len(),
                    model.weight_bytes() as f64 / 1e6
                ));
                return Ok((b, log));
            }
            Err(r) => {
                log.push(format!("{}: skipped — {r}", b.name()));
                last = Some((b.name(), r));
            }
        }
    }
    let (backend, r) = last.unwrap_or(("none", Refusal("no backend available".into())));
    Err(Error::Backend { backend, what: r.0 })
}
