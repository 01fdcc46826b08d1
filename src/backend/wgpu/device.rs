//! The adapter and device: found once per process, shared by every context.
//!
//! Choice: discrete > integrated > virtual > other GPU; a software adapter (`DeviceType::Cpu`,
//! e.g. llvmpipe) only when no GPU exists, and then only if the caller allows it. The device
//! gets the adapter's own limits and whichever of SHADER_F16, SUBGROUP, TIMESTAMP_QUERY and
//! PIPELINE_CACHE it has; every kernel runs without them. Device errors are caught in error
//! scopes (and an uncaptured-error handler that records instead of panicking).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::shaders::{Coop, WgslSource};
use crate::backend::gpu::kernels::Variant;
use crate::backend::gpu::shape::{DeviceProfile, DeviceShape};
use crate::backend::gpu::table::Bind;

/// The adapter we would use, described without creating a device.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub software: bool,
}

struct Probe {
    adapter: wgpu::Adapter,
    summary: AdapterSummary,
}

/// The best adapter of this machine, probed once. `Err` says why there is none.
fn probe() -> &'static Result<Probe, String> {
    static PROBE: OnceLock<Result<Probe, String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        let instance = super::instance::instance();
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        let rank = |t: wgpu::DeviceType| match t {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Other => 3,
            wgpu::DeviceType::Cpu => 4,
        };
        let best = adapters
            .into_iter()
            .filter(|a| {
                let caps = a.get_downlevel_capabilities();
                caps.flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)
                    && a.limits().max_storage_buffers_per_shader_stage
                        >= crate::backend::gpu::table::Kernel::max_storage_bindings()
            })
            .min_by_key(|a| rank(a.get_info().device_type));
        match best {
            Some(adapter) => {
                let info = adapter.get_info();
                let summary = AdapterSummary {
                    name: info.name.clone(),
                    backend: format!("{:?}", info.backend),
                    software: info.device_type == wgpu::DeviceType::Cpu,
                };
                Ok(Probe { adapter, summary })
            }
            None => Err("no adapter with compute shaders (Vulkan, Metal or DX12)".into()),
        }
    })
}

/// The adapter that `--backend wgpu` would use, or why there is none.
pub fn adapter() -> Result<AdapterSummary, String> {
    probe().as_ref().map(|p| p.summary.clone()).map_err(Clone::clone)
}

/// A compiled kernel and the layout its bind groups use.
pub struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// A pipeline's variant, and whether its shader is checked, takes the int8 matmuls and the
/// cooperative-matrix tiles it takes (`Gpu::pipeline`).
type PipelineKey = (Variant, bool, bool, Coop);

pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// What the schedule sizes launches for (`shape_of`).
    pub shape: DeviceShape,
    pub features: wgpu::Features,
    /// The smallest subgroup a 64-invocation kernel ran with (`subgroup_probe`), where the
    /// device has subgroups.
    pub subgroup_seen: Option<u32>,
    /// The kernels decode halves with `unpack2x16float`: the adapter has it, and a probe saw
    /// it decode all 65,536 as the integer decode does.
    pub f16_hw: bool,
    /// The cooperative matrices the prefill matmul may multiply on: 16 × 16 f16 ones with f32
    /// accumulators (`matmul_coop16.wgsl`) where the device has them and f16 shaders, else 8 × 8
    /// f32 ones (`matmul_coop.wgsl`); each needs subgroups of 32 and its probe to have seen
    /// them multiply correctly.
    pub coop: Coop,
    /// By variant and whether its shader keeps wgpu's runtime checks.
    pipelines: Mutex<HashMap<PipelineKey, Arc<Pipeline>>>,
    cache: Option<wgpu::PipelineCache>,
    /// Errors that reached no error scope (recorded, never a panic).
    uncaptured: Arc<Mutex<Vec<String>>>,
}

/// The device as the schedule sees it: the adapter's limits, and its compute units, which wgpu
/// does not report: those of the built-in profile its name matches (`NVIDIA H200`), else a
/// guess by its kind (a discrete GPU 64, an integrated one 16, a CPU adapter its threads).
fn shape_of(info: &wgpu::AdapterInfo, limits: &wgpu::Limits) -> DeviceShape {
    let sms = DeviceProfile::for_device_name(&info.name)
        .map(|p| p.sms)
        .unwrap_or(match info.device_type {
            wgpu::DeviceType::Cpu => std::thread::available_parallelism().map_or(4, |n| n.get() as u32),
            wgpu::DeviceType::IntegratedGpu => 16,
            _ => 64,
        });
    DeviceShape {
        sms,
        max_threads: limits.max_compute_invocations_per_workgroup.max(64),
        subgroup: if info.subgroup_max_size > 0 {
            info.subgroup_max_size
        } else {
            32
        },
        shared_bytes: limits.max_compute_workgroup_storage_size,
        max_groups: limits.max_compute_workgroups_per_dimension.min(65535),
        matrix_tiles: false,
        coop_f16: false,
    }
}

/// `Gpu::subgroups_usable` on its numbers: the feature, the reported minimum subgroup size,
/// and the size seen where that is to be trusted over it.
fn subgroups_usable(feature: bool, reported_min: u32, seen: Option<u32>) -> bool {
    feature && seen.unwrap_or(reported_min) >= 8
}

/// The smallest subgroup size any invocation of a 64-invocation kernel (the matvecs' and
/// reductions' size) saw, over 64 workgroups.
/// How many of the 65,536 halves `unpack2x16float` decodes otherwise than the kernels' integer
/// decode (`shaders::f16_probe_source`).
fn f16_probe(gpu: &Gpu) -> Result<u32, String> {
    let src = super::shaders::f16_probe_source();
    run_probe(gpu, "f16 probe", &src, 65536 / 64, 0)
}

/// Runs a one-binding kernel (`bad` / `seen`: one u32, starting at `init`) over `groups`
/// workgroups and reads the word back.
pub(super) fn run_probe(gpu: &Gpu, label: &str, src: &str, groups: u32, init: u32) -> Result<u32, String> {
    let d = &gpu.device;
    let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
    let pipeline = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let buf = d.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: 4,
        usage,
        mapped_at_creation: false,
    });
    gpu.queue.write_buffer(&buf, 0, &init.to_le_bytes());
    let readback = d.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: 4,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let group = d.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(label),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: buf.as_entire_binding(),
        }],
    });
    let mut enc = d.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(groups, 1, 1);
    }
    enc.copy_buffer_to_buffer(&buf, 0, &readback, 0, 4);
    gpu.queue.submit([enc.finish()]);
    let bytes = gpu.read(&readback, 4)?;
    Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// How many of 128 outputs (two subgroups' 8 × 8) of two 8 × 8 × 8 cooperative multiply-adds
/// differ from the scalar products, with the loads, offsets, strides and store `matmul_coop.wgsl`
/// uses (`shaders::COOP_PROBE`); the values are small integers, so every sum is exact.
fn coop_probe(gpu: &Gpu) -> Result<u32, String> {
    run_probe(gpu, "cooperative matrix probe", super::shaders::COOP_PROBE, 1, 0)
}

/// `coop_probe` for the 16 × 16 f16 matrices (`shaders::coop16_probe_source`): 4,096 outputs.
fn coop16_probe(gpu: &Gpu) -> Result<u32, String> {
    run_probe(
        gpu,
        "f16 cooperative matrix probe",
        &super::shaders::coop16_probe_source(false),
        1,
        0,
    )
}

/// The probe of the f16 attention tile's matrix operations
/// (`shaders::attention16_probe_source`): 2,048 outputs.
fn attention16_probe(gpu: &Gpu) -> Result<u32, String> {
    run_probe(
        gpu,
        "f16 cooperative matrix attention probe",
        &super::shaders::attention16_probe_source(false),
        1,
        0,
    )
}

fn subgroup_probe(gpu: &Gpu) -> Result<u32, String> {
    const SRC: &str = "@group(0) @binding(0) var<storage, read_write> seen: array<atomic<u32>, 1>;\n\
        @compute @workgroup_size(64)\n\
        fn main(@builtin(subgroup_size) n: u32) {\n    atomicMin(&seen[0], n);\n}\n";
    match run_probe(gpu, "subgroup probe", SRC, 64, u32::MAX)? {
        u32::MAX => Err("the subgroup probe wrote nothing".into()),
        n => Ok(n),
    }
}

/// The shared device on the best adapter, created on first use.
pub fn gpu() -> Result<Arc<Gpu>, String> {
    static GPU: OnceLock<Result<Arc<Gpu>, String>> = OnceLock::new();
    GPU.get_or_init(|| {
        let p = probe().as_ref().map_err(Clone::clone)?;
        Gpu::new(&p.adapter).map(Arc::new)
    })
    .clone()
}

impl Gpu {
    fn new(adapter: &wgpu::Adapter) -> Result<Gpu, String> {
        let wanted = wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::PIPELINE_CACHE;
        // Cooperative matrices are experimental in wgpu: asked for only where the adapter has
        // a configuration a kernel uses.
        let has = |size: u32, ab: wgpu::CooperativeScalarType| {
            adapter.cooperative_matrix_properties().iter().any(|c| {
                (c.m_size, c.n_size, c.k_size) == (size, size, size)
                    && c.ab_type == ab
                    && c.cr_type == wgpu::CooperativeScalarType::F32
            })
        };
        let coop_8x8_f32 = has(8, wgpu::CooperativeScalarType::F32);
        let coop_16x16_f16 = has(16, wgpu::CooperativeScalarType::F16);
        let wanted = match coop_8x8_f32 || coop_16x16_f16 {
            true => wanted | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
            false => wanted,
        };
        let features = adapter.features() & wanted;
        let coop = features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SUBGROUP);
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("minfer"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: match coop {
                // SAFETY: the one experimental feature asked for is cooperative matrices; a
                // probe checks them before any kernel uses them, and only `matmul_coop.wgsl`,
                // `matmul_coop16.wgsl` and `attention_tile_coop16.wgsl` do (their loads and
                // stores stay within their workgroup arrays).
                true => unsafe { wgpu::ExperimentalFeatures::enabled() },
                false => wgpu::ExperimentalFeatures::disabled(),
            },
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| format!("request_device: {e}"))?;
        let uncaptured = Arc::new(Mutex::new(Vec::new()));
        let sink = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let info = adapter.get_info();
        let cache = if features.contains(wgpu::Features::PIPELINE_CACHE) {
            let data = cache_path(&info).and_then(|p| std::fs::read(p).ok());
            // SAFETY: the data is either absent or what `get_data` wrote for this adapter's key;
            // `fallback: true` makes the driver validate it and start empty if it is stale.
            Some(unsafe {
                device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
                    label: Some("minfer pipelines"),
                    data: data.as_deref(),
                    fallback: true,
                })
            })
        } else {
            None
        };
        let shape = shape_of(&info, &limits);
        let mut gpu = Gpu {
            device,
            queue,
            shape,
            info,
            limits,
            features,
            subgroup_seen: None,
            f16_hw: false,
            coop: Coop::Off,
            pipelines: Mutex::new(HashMap::new()),
            cache,
            uncaptured,
        };
        // Halves decoded by the hardware only where it decodes every one exactly as the
        // integer decode does; a probe that fails leaves the integer decode.
        if adapter
            .get_downlevel_capabilities()
            .flags
            .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32)
        {
            gpu.f16_hw = gpu.scoped("f16 probe", || f16_probe(&gpu)).ok() == Some(Ok(0));
        }
        if gpu.has(wgpu::Features::SUBGROUP) {
            // A probe that fails leaves the reported minimum to decide.
            gpu.subgroup_seen = gpu
                .scoped("subgroup probe", || subgroup_probe(&gpu))
                .ok()
                .and_then(Result::ok);
        }
        // The kernel splits its workgroup into two subgroups of 32 (Apple's SIMD groups are
        // always 32 wide; elsewhere the adapter must say so).
        let metal = gpu.info.backend == wgpu::Backend::Metal;
        let sg32 = gpu.subgroup_seen == Some(32) && (metal || gpu.info.subgroup_max_size == 32);
        let passes =
            |name: &str, probe: fn(&Gpu) -> Result<u32, String>| gpu.scoped(name, || probe(&gpu)).ok() == Some(Ok(0));
        if coop
            && sg32
            && coop_16x16_f16
            && gpu.has(wgpu::Features::SHADER_F16)
            && gpu.limits.max_compute_workgroup_storage_size >= super::shaders::COOP16_SHARED_BYTES
            && passes("f16 cooperative matrix probe", coop16_probe)
            && passes("f16 cooperative matrix attention probe", attention16_probe)
        {
            gpu.coop = Coop::F16x16;
        } else if coop && sg32 && coop_8x8_f32 && passes("cooperative matrix probe", coop_probe) {
            gpu.coop = Coop::F32x8;
        }
        Ok(gpu)
    }

    /// Whether the kernels may take their subgroup path here: the device has subgroups of 8
    /// lanes or more (a `matmul_vec` row spans whole subgroups, or a subgroup whole rows: the
    /// sizes are powers of two). The reported minimum says
    /// so, or, on Metal, where wgpu reports 4 for every GPU while Apple's SIMD groups are a
    /// fixed 32 lanes, the size a kernel of ours was seen to run with.
    pub fn subgroups_usable(&self) -> bool {
        let metal = self.info.backend == wgpu::Backend::Metal;
        subgroups_usable(
            self.has(wgpu::Features::SUBGROUP),
            self.info.subgroup_min_size,
            metal.then_some(self.subgroup_seen).flatten(),
        )
    }

    pub fn has(&self, f: wgpu::Features) -> bool {
        self.features.contains(f)
    }

    /// `Vulkan, llvmpipe (LLVM 15.0.6, 256 bits), subgroups 8–8`; where a kernel ran with
    /// other than the reported minimum, `subgroups 4–64 (32 seen)`.
    pub fn describe(&self) -> String {
        let mut s = format!("{:?}, {}", self.info.backend, self.info.name);
        if self.has(wgpu::Features::SUBGROUP) {
            s += &format!(
                ", subgroups {}–{}",
                self.info.subgroup_min_size, self.info.subgroup_max_size
            );
            if let Some(n) = self.subgroup_seen.filter(|&n| n != self.info.subgroup_min_size) {
                s += &format!(" ({n} seen)");
            }
        }
        if self.f16_hw {
            s += ", f16 decode in hardware";
        }
        match self.coop {
            Coop::F16x16 => s += ", cooperative matrices (16 × 16 f16)",
            Coop::F32x8 => s += ", cooperative matrices (8 × 8 f32)",
            Coop::Off | Coop::F16x16Emulated => {}
        }
        s
    }

    /// `size` bytes of the mappable buffer `buf`, after the work submitted so far.
    pub fn read(&self, buf: &wgpu::Buffer, size: u64) -> Result<Vec<u8>, String> {
        let slice = buf.slice(..size);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| format!("poll: {e}"))?;
        rx.recv()
            .map_err(|e| format!("map: {e}"))?
            .map_err(|e| format!("map: {e}"))?;
        let out = slice.get_mapped_range().map_err(|e| format!("map: {e}"))?.to_vec();
        buf.unmap();
        Ok(out)
    }

    /// Largest storage binding, also capped by the largest buffer.
    pub fn max_binding(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    /// Runs `f` inside validation and out-of-memory error scopes; the first error is returned.
    pub fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let r = f();
        let e_val = pollster::block_on(val.pop());
        let e_oom = pollster::block_on(oom.pop());
        match e_val.or(e_oom) {
            Some(e) => Err(format!("{what}: {e}")),
            None => Ok(r),
        }
    }

    /// Errors no scope caught since the last call.
    pub fn take_uncaptured(&self) -> Option<String> {
        let mut v = self.uncaptured.lock().ok()?;
        if v.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut *v).join("; "))
        }
    }

    /// The pipeline for `v`, built on first use and kept for the life of the device; `checked`:
    /// with wgpu's runtime checks in the shader (bounds clamped, loops bounded), else trusted
    /// without them; `int8`: the int8 matmuls, `coop`: the prefill tiles on cooperative
    /// matrices (`WgslSource::source_with`).
    pub fn pipeline(&self, v: Variant, checked: bool, int8: bool, coop: Coop) -> Result<Arc<Pipeline>, String> {
        if let Some(p) = self
            .pipelines
            .lock()
            .map_err(|e| e.to_string())?
            .get(&(v, checked, int8, coop))
        {
            return Ok(p.clone());
        }
        let name = v.name();
        let src = v
            .source_with(self.f16_hw, int8, coop)
            .ok_or_else(|| format!("{name}: no shader for this type"))?;
        let p = self.scoped(&name, || {
            let desc = wgpu::ShaderModuleDescriptor {
                label: Some(&name),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            };
            let module = match checked {
                true => self.device.create_shader_module(desc),
                // SAFETY: the kernels index within their bindings for every launch the
                // schedule makes (the tests run them unchecked and compare them with the
                // checked build bit for bit), and every loop is bounded by its parameters.
                // Division checks stay.
                false => unsafe {
                    self.device.create_shader_module_trusted(
                        desc,
                        wgpu::ShaderRuntimeChecks {
                            bounds_checks: false,
                            force_loop_bounding: false,
                            ..wgpu::ShaderRuntimeChecks::checked()
                        },
                    )
                },
            };
            let entries: Vec<wgpu::BindGroupLayoutEntry> = v
                .kernel
                .bindings()
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupLayoutEntry {
                    binding: i as u32,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: match b {
                        Bind::Uniform => wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Uniform,
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                        Bind::Read | Bind::ReadWrite => wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Storage {
                                read_only: *b == Bind::Read,
                            },
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                    },
                    count: None,
                })
                .collect();
            let layout = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(&name),
                entries: &entries,
            });
            let pl = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(&name),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
            let constants = v.constants();
            let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&name),
                layout: Some(&pl),
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: true,
                },
                cache: self.cache.as_ref(),
            });
            Arc::new(Pipeline { pipeline, layout })
        })?;
        self.pipelines
            .lock()
            .map_err(|e| e.to_string())?
            .insert((v, checked, int8, coop), p.clone());
        Ok(p)
    }

    /// Writes the driver's pipeline cache back to disk (best effort).
    pub fn save_pipeline_cache(&self) {
        if let (Some(cache), Some(path)) = (&self.cache, cache_path(&self.info)) {
            if let Some(data) = cache.get_data() {
                if let Some(dir) = path.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                // A name of its own per writer: contexts in other threads may save at once.
                static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
                if std::fs::write(&tmp, data).is_ok() {
                    let _ = std::fs::rename(tmp, path);
                }
            }
        }
    }
}

/// `$XDG_CACHE_HOME/minfer/wgpu-<key>.bin` (else `~/.cache`), keyed by wgpu's own cache key.
fn cache_path(info: &wgpu::AdapterInfo) -> Option<std::path::PathBuf> {
    let key = wgpu::util::pipeline_cache_key(info)?;
    Some(crate::backend::cache_dir()?.join(key))
}

#[cfg(test)]
mod tests {
    use super::subgroups_usable;

    /// Metal reports 4 as every GPU's minimum; the size a kernel ran with decides there.
    #[test]
    fn the_subgroup_path_needs_8_lanes_reported_or_seen() {
        assert!(subgroups_usable(true, 8, None));
        assert!(!subgroups_usable(true, 4, None));
        assert!(subgroups_usable(true, 4, Some(32)), "Apple's 32-lane SIMD groups");
        assert!(!subgroups_usable(true, 4, Some(4)));
        assert!(!subgroups_usable(true, 16, Some(4)), "seen, where trusted, decides");
        assert!(!subgroups_usable(false, 32, Some(32)));
    }
}
