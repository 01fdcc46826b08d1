//! The CUDA driver as a `Device`: one context and one stream per backend, modules compiled by
//! NVRTC per op file, launches through the driver API, decode steps captured as CUDA graphs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaGraph, CudaModule, CudaStream, DevicePtr, DeviceRepr};

use super::device::{DevBuf, Device, Func, FuncTable, Params, Replay};
use super::source;
use crate::backend::gpu::kernels::Variant;
use crate::backend::gpu::shape::DeviceShape;
use crate::backend::gpu::table::Kernel;
use crate::backend::Refusal;

// SAFETY: `Params` is `#[repr(C)]` plain data, laid out as the kernels' `struct Params`.
unsafe impl DeviceRepr for Params {}

pub struct Driver {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    /// SMs, block and shared-memory limits, warp width (read once at open).
    shape: DeviceShape,
    /// What NVRTC compiles for: `sm_90` (CUBIN) where it has the device's architecture,
    /// else `compute_90` (PTX).
    target: String,
    total: usize,
    /// The device has programmatic dependent launch (sm_90 and later, a 12.3 driver or newer).
    has_pdl: bool,
    /// Kernels are launched with it (`Device::set_pdl`; on where the device has it).
    pdl: AtomicBool,
    /// The device has integer mma.sync (sm_80 and later).
    has_mma: bool,
    /// The prefill matmul takes its tensor-core entries (`Device::set_mma`; on where it can).
    mma: AtomicBool,
    modules: Mutex<HashMap<Kernel, Arc<CudaModule>>>,
    funcs: Mutex<FuncTable<CudaFunction>>,
}

fn derr(e: cudarc::driver::DriverError) -> String {
    format!("{e:?}")
}

impl Driver {
    /// The device `ordinal`, or why not: no driver library, no NVRTC, no such device. Never
    /// panics (cudarc panics where a library is missing; that is checked first and contained).
    pub fn open(ordinal: usize) -> Result<Driver, Refusal> {
        // SAFETY: probing for the library only opens and closes it.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(Refusal("no driver (libcuda.so not found)".into()));
        }
        let nvrtc = source::nvrtc_version().map_err(Refusal)?;
        let opened = std::panic::catch_unwind(|| -> Result<Driver, String> {
            let mut driver = 0;
            // SAFETY: one out-parameter.
            let rc = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver) };
            if rc != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
                return Err(format!("cuDriverGetVersion: {rc:?}"));
            }
            let n = CudaContext::device_count().map_err(derr)?;
            if n <= 0 {
                return Err("no CUDA device".into());
            }
            if ordinal >= n as usize {
                return Err(format!("--gpu {ordinal}: there are {n} CUDA devices (0..{})", n - 1));
            }
            let ctx = CudaContext::new(ordinal).map_err(derr)?;
            // One stream, everything in order: no per-buffer events needed.
            // SAFETY: nothing has been allocated on this context yet.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream().map_err(derr)?;
            let cc = ctx.compute_capability().map_err(derr)?;
            let target = source::target(cc, &source::cubin_archs()?);
            // Before anything is uploaded: a driver that would refuse the modules is refused.
            source::check_driver(nvrtc, driver, &target)?;
            let name = ctx.name().map_err(derr)?;
            // Hopper and later; a driver of CUDA 12.3 or newer, which also captures such
            // launches into graphs.
            let pdl = cc.0 >= 9 && driver >= 12030;
            let total = ctx.total_mem().map_err(derr)?;
            let shape = {
                use cudarc::driver::sys::CUdevice_attribute as A;
                let at = |a| ctx.attribute(a).map_err(derr).map(|v| v.max(1) as u32);
                DeviceShape {
                    sms: at(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
                    max_threads: at(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
                    subgroup: at(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
                    shared_bytes: at(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
                    max_groups: at(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?.min(65535),
                    matrix_tiles: cc.0 >= 8,
                    coop_f16: false,
                }
            };
            Ok(Driver {
                shape,
                ctx,
                stream,
                name,
                target,
                total,
                has_pdl: pdl,
                pdl: AtomicBool::new(pdl),
                has_mma: cc.0 >= 8,
                mma: AtomicBool::new(cc.0 >= 8),
                modules: Mutex::new(HashMap::new()),
                funcs: Mutex::new(FuncTable::default()),
            })
        });
        match opened {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => Err(Refusal(e)),
            Err(_) => Err(Refusal("the CUDA driver could not be initialised".into())),
        }
    }

    fn module(&self, k: Kernel) -> Result<Arc<CudaModule>, String> {
        let mut mods = self.modules.lock().map_err(|_| "module table poisoned".to_string())?;
        if let Some(m) = mods.get(&k) {
            return Ok(m.clone());
        }
        let m = self.load(k, source::compile(k, &self.target, true)?)?;
        mods.insert(k, m.clone());
        Ok(m)
    }

    fn load(&self, k: Kernel, image: source::Image) -> Result<Arc<CudaModule>, String> {
        let image = match image {
            source::Image::Cubin(b) => cudarc::nvrtc::Ptx::from_binary(b),
            source::Image::Ptx(s) => cudarc::nvrtc::Ptx::from_src(s),
        };
        self.ctx
            .load_module(image)
            .map_err(|e| format!("loading {}.cu for {}: {}", k.name(), self.target, derr(e)))
    }
}

impl Driver {
    /// One launch through cuLaunchKernelEx with programmatic stream serialization allowed: the
    /// kernel may begin launching while the one before it finishes (its `binding` waits).
    fn launch_pdl(&self, func: &CudaFunction, grid: [u32; 3], block: u32, p: &Params) -> Result<(), String> {
        use cudarc::driver::sys;
        self.ctx.bind_to_thread().map_err(derr)?;
        // SAFETY: an all-zero attribute is a valid value of the C struct; the union member
        // written is the one its id names.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: grid[0],
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // The kernel's one parameter, `const Params p`: its address.
        let mut args = [p as *const Params as *mut std::ffi::c_void];
        // SAFETY: every kernel takes exactly one `Params` (copied at the call), whose addresses
        // the schedule points at live buffers sized for the launch; `cfg` and `attr` outlive
        // the call.
        let rc = unsafe { sys::cuLaunchKernelEx(&cfg, func.cu_function(), args.as_mut_ptr(), std::ptr::null_mut()) };
        match rc {
            sys::CUresult::CUDA_SUCCESS => Ok(()),
            rc => Err(format!("cuLaunchKernelEx: {rc:?}")),
        }
    }
}

struct Slice(#[allow(dead_code)] cudarc::driver::CudaSlice<u8>);

/// A captured graph. CUDA graphs are not thread-safe; this one is only touched by the context
/// that owns it, which is used by one thread at a time.
struct Graph(CudaGraph);

// SAFETY: see `Graph`: never shared, only moved with its context.
unsafe impl Send for Graph {}

impl Replay for Graph {
    fn replay(&self) -> Result<(), String> {
        self.0.launch().map_err(derr)
    }
}

impl Device for Driver {
    fn shape(&self) -> DeviceShape {
        DeviceShape {
            matrix_tiles: self.shape.matrix_tiles && self.mma.load(Ordering::Relaxed),
            ..self.shape
        }
    }

    fn describe(&self) -> String {
        // `sm_90`, or `sm_61 via PTX` where NVRTC writes no machine code for it.
        let arch = match self.target.strip_prefix("compute_") {
            Some(n) => format!("sm_{n} via PTX"),
            None => self.target.clone(),
        };
        let pdl = if self.pdl.load(Ordering::Relaxed) { ", PDL" } else { "" };
        format!(
            "{} ({arch}, {:.1} GiB{pdl})",
            self.name,
            self.total as f64 / (1u64 << 30) as f64
        )
    }

    fn free_memory(&self) -> Option<u64> {
        self.ctx.mem_get_info().ok().map(|(free, _)| free as u64)
    }

    fn alloc(&self, bytes: usize) -> Result<DevBuf, String> {
        let n = bytes.max(16).div_ceil(16) * 16;
        let s = self
            .stream
            .alloc_zeros::<u8>(n)
            .map_err(|e| format!("allocating {n} bytes: {}", derr(e)))?;
        let ptr = s.device_ptr(&self.stream).0;
        Ok(DevBuf {
            ptr,
            bytes: n,
            _owner: Box::new(Slice(s)),
        })
    }

    fn write(&self, dst: u64, data: &[u8]) -> Result<(), String> {
        if data.is_empty() {
            return Ok(());
        }
        // The raw driver calls below act on the calling thread's current context.
        self.ctx.bind_to_thread().map_err(derr)?;
        // SAFETY: `dst` is inside a live allocation of this context (the callers' `DevBuf`s);
        // from pageable memory the copy is staged before this returns.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, data, self.stream.cu_stream()) }.map_err(derr)
    }

    fn read(&self, src: u64, out: &mut [u8]) -> Result<(), String> {
        self.ctx.bind_to_thread().map_err(derr)?;
        // SAFETY: as `write`; into pageable memory the copy is complete when this returns.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(out, src, self.stream.cu_stream()) }.map_err(derr)?;
        self.stream.synchronize().map_err(derr)
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), String> {
        self.ctx.bind_to_thread().map_err(derr)?;
        // SAFETY: both ranges lie in live allocations of this context.
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }.map_err(derr)
    }

    fn prepare(&self, kernels: &[Kernel]) -> Result<(), String> {
        let missing: Vec<Kernel> = {
            let mods = self.modules.lock().map_err(|_| "module table poisoned".to_string())?;
            let mut v: Vec<Kernel> = kernels.iter().copied().filter(|k| !mods.contains_key(k)).collect();
            v.sort_by_key(|&k| k as usize);
            v.dedup();
            v
        };
        // One thread per op file, as many at once as the CPU has cores; each one's image is
        // loaded as it comes.
        let width = std::thread::available_parallelism().map_or(4, |n| n.get());
        for batch in missing.chunks(width.max(1)) {
            let images: Vec<Result<source::Image, String>> = std::thread::scope(|s| {
                let hs: Vec<_> = batch
                    .iter()
                    .map(|&k| s.spawn(move || source::compile(k, &self.target, true)))
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err("an NVRTC thread panicked".into())))
                    .collect()
            });
            for (&k, image) in batch.iter().zip(images) {
                let m = self.load(k, image?)?;
                self.modules
                    .lock()
                    .map_err(|_| "module table poisoned".to_string())?
                    .insert(k, m);
            }
        }
        Ok(())
    }

    fn function(&self, v: &Variant, mma_cols: Option<u32>) -> Result<Func, String> {
        let mut f = self.funcs.lock().map_err(|_| "function table poisoned".to_string())?;
        f.get_or_load(v, mma_cols.filter(|_| self.takes_mma(v)), |entry| {
            self.module(v.kernel)?
                .load_function(entry)
                .map_err(|e| format!("{}.cu has no kernel {entry}: {}", v.kernel.name(), derr(e)))
        })
    }

    fn set_mma(&self, on: bool) {
        self.mma.store(on && self.has_mma, Ordering::Relaxed);
    }

    fn takes_mma(&self, v: &Variant) -> bool {
        self.mma.load(Ordering::Relaxed) && v.has_mma()
    }

    fn set_pdl(&self, on: bool) {
        self.pdl.store(on && self.has_pdl, Ordering::Relaxed);
    }

    fn launch(&self, f: Func, grid: [u32; 3], block: u32, p: &Params) -> Result<(), String> {
        let funcs = self.funcs.lock().map_err(|_| "function table poisoned".to_string())?;
        let func = funcs.get(f)?;
        if self.pdl.load(Ordering::Relaxed) {
            return self.launch_pdl(func, grid, block, p);
        }
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (grid[0], grid[1], grid[2]),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        use cudarc::driver::PushKernelArg;
        let mut b = self.stream.launch_builder(func);
        b.arg(p);
        // SAFETY: every kernel takes exactly one `Params`, whose addresses the schedule
        // points at live buffers sized for the launch.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(derr)
    }

    fn timed(&self, run: &mut dyn FnMut() -> Result<(), String>) -> Result<f64, String> {
        let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.stream.record_event(timing).map_err(derr)?;
        run()?;
        let end = self.stream.record_event(timing).map_err(derr)?;
        Ok(start.elapsed_ms(&end).map_err(derr)? as f64 * 1e6)
    }

    fn capture(&self, run: &mut dyn FnMut() -> Result<(), String>) -> Result<Option<Box<dyn Replay>>, String> {
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(derr)?;
        let ran = run();
        let graph = self.stream.end_capture(CUgraphInstantiate_flags(0)).map_err(derr)?;
        ran?;
        Ok(graph.map(|g| Box::new(Graph(g)) as Box<dyn Replay>))
    }
}
