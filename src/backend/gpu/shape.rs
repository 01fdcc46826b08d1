//! The device as the schedule and `plan` see it. `DeviceShape` is what sizes launches (how many
//! workgroups fill the device, how wide one may be); a backend reads it once from its device.
//! `DeviceProfile` adds what a roofline needs (bandwidth, peaks, per-SM limits for occupancy):
//! the built-in ones are data (`devices.json`), and any JSON file of the same fields is one.

use serde::{Deserialize, Serialize};

/// What the schedule knows of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceShape {
    /// Streaming multiprocessors (CUDA) or compute units: the workgroups that run at once, one
    /// on each, at the least. A launch that moves real data should have at least this many.
    pub sms: u32,
    /// Most invocations in one workgroup.
    pub max_threads: u32,
    /// The subgroup (warp, SIMD group) width the kernels are written for.
    pub subgroup: u32,
    /// Workgroup memory one workgroup may use, in bytes.
    pub shared_bytes: u32,
    /// Most workgroups along one grid dimension (grids fold into x and y below it).
    pub max_groups: u32,
    /// Whether the tiled matmul multiplies on matrix units (CUDA's int8 `mma.sync`, whose tiles
    /// narrow and share out their steps for a few dozen tokens). Without them a batched decode step of up to
    /// `VEC_WIDE_TOKENS` takes the matvec, where the 32 × 32 tiles would leave compute units
    /// idle.
    pub matrix_tiles: bool,
    /// Whether the prefill tiles multiply on 16 × 16 f16 cooperative matrices (wgpu's
    /// `Coop::F16x16`, or its emulation): the attention's tiles then take
    /// `Variant::coop_attention_tq`'s tokens where its head sizes suit them.
    pub coop_f16: bool,
}

impl DeviceShape {
    /// A shape with every limit WebGPU guarantees and `sms` compute units: what a backend
    /// assumes of a device that says no more.
    pub const fn portable(sms: u32) -> DeviceShape {
        DeviceShape {
            sms,
            max_threads: 256,
            subgroup: 32,
            shared_bytes: 16384,
            max_groups: 65535,
            matrix_tiles: false,
            coop_f16: false,
        }
    }

    /// One line for logs: `132 SMs, 1024 threads, 227 KiB shared`.
    pub fn describe(&self) -> String {
        format!(
            "{} SMs, {} threads, {} KiB shared",
            self.sms,
            self.max_threads,
            self.shared_bytes / 1024
        )
    }
}

/// A device for `plan`'s roofline: its shape, its per-SM limits (theoretical occupancy) and its
/// throughputs. Fields as in `devices.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    pub name: String,
    pub description: String,
    /// The CUDA architecture NVRTC compiles for to report registers (`sm_90`); `null` where the
    /// device is not NVIDIA's.
    pub arch: Option<String>,
    pub sms: u32,
    pub subgroup: u32,
    pub max_threads: u32,
    /// Workgroup memory one workgroup may use (bytes).
    pub shared_per_wg: u32,
    /// Resident threads, workgroups, registers and workgroup memory per SM.
    pub threads_per_sm: u32,
    pub wg_per_sm: u32,
    pub regs_per_sm: Option<u32>,
    pub shared_per_sm: u32,
    /// What a copy reaches, GB/s.
    pub bandwidth_gbs: f64,
    /// Peaks: f32 FMA, 4-wide int8 dot products (dp4a, dot4I8Packed), the matrix units on f16
    /// and on int8, each in tera-operations per second (a multiply-add is two).
    pub f32_tflops: f64,
    pub dot4_tops: f64,
    pub f16_tensor_tflops: f64,
    pub int8_tensor_tops: f64,
    /// L1 wavefronts a second over the device, in billions (SMs × clock under load: an SM's L1
    /// takes one a clock, where a wavefront is a warp's shared-memory access free of bank
    /// conflicts, or the sectors of one line a warp's global load touches); where known. A tile
    /// whose loads and fragment reads outrun it waits on its L1, whatever its units' peaks.
    #[serde(default)]
    pub l1_gwavefronts: Option<f64>,
    /// The shortest a launch takes, µs.
    pub launch_us: f64,
    /// The largest storage binding (wgpu), bytes.
    pub max_binding: u64,
    #[serde(default)]
    pub note: String,
}

/// The arithmetic unit a launch's operations run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    F32,
    Dot4,
    F16Tensor,
    Int8Tensor,
}

/// A kernel's resources as the compiler reports them (NVRTC's `ptxas -v`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub registers: u32,
    /// Static workgroup memory, bytes.
    pub shared: u32,
    /// Bytes spilled to local memory (stores).
    pub spill: u32,
}

impl DeviceProfile {
    /// The built-in profiles (`devices.json`).
    pub fn builtin() -> Vec<DeviceProfile> {
        serde_json::from_str(include_str!("devices.json")).expect("devices.json parses (tested)")
    }

    /// A built-in profile by name, or a JSON file of one.
    pub fn find(name: &str) -> Result<DeviceProfile, String> {
        if let Some(p) = DeviceProfile::builtin().into_iter().find(|p| p.name == name) {
            return Ok(p);
        }
        let path = std::path::Path::new(name);
        if !path.is_file() {
            let names: Vec<String> = DeviceProfile::builtin().into_iter().map(|p| p.name).collect();
            return Err(format!(
                "device profile '{name}': not a built-in one ({}) nor a JSON file",
                names.join(", ")
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
        let p: DeviceProfile = serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
        p.check().map_err(|e| format!("{name}: {e}"))?;
        Ok(p)
    }

    /// Every count positive and every rate finite and positive.
    pub fn check(&self) -> Result<(), String> {
        let counts = [
            ("sms", self.sms),
            ("subgroup", self.subgroup),
            ("max_threads", self.max_threads),
            ("threads_per_sm", self.threads_per_sm),
            ("wg_per_sm", self.wg_per_sm),
        ];
        for (f, v) in counts {
            if v == 0 {
                return Err(format!("{f} must be positive"));
            }
        }
        let rates = [
            ("bandwidth_gbs", self.bandwidth_gbs),
            ("f32_tflops", self.f32_tflops),
            ("dot4_tops", self.dot4_tops),
            ("f16_tensor_tflops", self.f16_tensor_tflops),
            ("int8_tensor_tops", self.int8_tensor_tops),
        ];
        for (f, v) in rates {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{f} must be a positive number, not {v}"));
            }
        }
        if let Some(v) = self.l1_gwavefronts.filter(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(format!("l1_gwavefronts must be a positive number, not {v}"));
        }
        if !(self.launch_us.is_finite() && self.launch_us >= 0.0) {
            return Err(format!("launch_us must be a number ≥ 0, not {}", self.launch_us));
        }
        Ok(())
    }

    /// The built-in profile of the device an adapter or CUDA device names
    /// (`NVIDIA H200`, `NVIDIA H100 80GB HBM3`, `NVIDIA GeForce RTX 4090`, `Apple M3 Max`), if
    /// any. An H100 PCIe or NVL (114 or 132 SMs on other memory) takes none.
    pub fn for_device_name(device: &str) -> Option<DeviceProfile> {
        let d = device.to_ascii_lowercase().replace(' ', "");
        let key = |p: &DeviceProfile| match p.name.as_str() {
            "h200" => "h200",
            "h100" if !d.contains("pcie") && !d.contains("nvl") => "h100",
            "a100" => "a100",
            "rtx4090" => "rtx4090",
            "m3max" => "m3max",
            _ => "",
        };
        DeviceProfile::builtin()
            .into_iter()
            .find(|p| !key(p).is_empty() && d.contains(key(p)))
    }

    pub fn shape(&self) -> DeviceShape {
        DeviceShape {
            sms: self.sms,
            max_threads: self.max_threads,
            subgroup: self.subgroup,
            shared_bytes: self.shared_per_wg,
            max_groups: 65535,
            matrix_tiles: false,
            coop_f16: false,
        }
    }

    /// Operations per second of `unit`.
    pub fn peak(&self, unit: Unit) -> f64 {
        1e12 * match unit {
            Unit::F32 => self.f32_tflops,
            Unit::Dot4 => self.dot4_tops,
            Unit::F16Tensor => self.f16_tensor_tflops,
            Unit::Int8Tensor => self.int8_tensor_tops,
        }
    }

    /// Workgroups of `threads` that fit one SM at once, given the kernel's resources where
    /// known (registers in units of 256 per warp, workgroup memory in units of 128 bytes plus
    /// the 1 KiB the driver keeps per workgroup, as on sm_80 to sm_90), else by threads alone.
    pub fn resident(&self, threads: u32, res: Option<&Resources>) -> u32 {
        let warps = threads.div_ceil(self.subgroup).max(1);
        let mut n = (self.threads_per_sm / self.subgroup / warps).min(self.wg_per_sm);
        if let Some(r) = res {
            if let Some(regs) = self.regs_per_sm {
                let per_warp = (r.registers.max(1) * self.subgroup).div_ceil(256) * 256;
                n = n.min(regs / (per_warp * warps));
            }
            let shared = (r.shared + 1024).div_ceil(128) * 128;
            n = n.min(self.shared_per_sm / shared);
        }
        n
    }

    /// Theoretical occupancy: the resident warps of a kernel of `threads` per workgroup over
    /// the most an SM holds.
    pub fn occupancy(&self, threads: u32, res: &Resources) -> f64 {
        let warps = threads.div_ceil(self.subgroup);
        let max_warps = self.threads_per_sm / self.subgroup;
        (self.resident(threads, Some(res)) * warps) as f64 / max_warps as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse_and_check() {
        let all = DeviceProfile::builtin();
        let names: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["h200", "h100", "a100", "rtx4090", "m3max"]);
        for p in &all {
            p.check().unwrap();
        }
        assert_eq!(DeviceProfile::find("h200").unwrap().sms, 132);
        let e = DeviceProfile::find("h100x").unwrap_err();
        assert!(e.contains("h100x") && e.contains("rtx4090"), "{e}");
        assert_eq!(
            DeviceProfile::for_device_name("NVIDIA H200").map(|p| p.name),
            Some("h200".into())
        );
        assert_eq!(
            DeviceProfile::for_device_name("NVIDIA H100 80GB HBM3").map(|p| p.name),
            Some("h100".into())
        );
        assert!(DeviceProfile::for_device_name("NVIDIA H100 PCIe").is_none());
        assert_eq!(
            DeviceProfile::for_device_name("NVIDIA GeForce RTX 4090").map(|p| p.name),
            Some("rtx4090".into())
        );
        assert!(DeviceProfile::for_device_name("llvmpipe (LLVM 15.0.6, 256 bits)").is_none());
    }

    /// NVIDIA's occupancy calculator on sm_90, and Nsight Compute's figures for the H200 run
    /// (perf/h200-2026-12-04.md): 128 threads at 116 registers are 4 workgroups (25 %), 64
    /// threads at 56 registers 18 (56 %), 256 threads at 32 registers 8 (100 %); 48 KiB of
    /// workgroup memory leaves room for 4.
    #[test]
    fn occupancy_follows_the_sm_limits() {
        let h = DeviceProfile::find("h200").unwrap();
        let r = |registers, shared| Resources {
            registers,
            shared,
            spill: 0,
        };
        assert_eq!(h.resident(128, Some(&r(116, 0))), 4);
        assert_eq!(h.occupancy(128, &r(116, 0)), 0.25);
        assert_eq!(h.resident(64, Some(&r(56, 0))), 18);
        assert_eq!(h.occupancy(256, &r(32, 0)), 1.0);
        assert_eq!(h.resident(256, Some(&r(32, 48 * 1024))), 4);
        assert_eq!(h.resident(64, None), 32);
        let a = DeviceProfile::find("rtx4090").unwrap();
        assert_eq!(a.occupancy(256, &r(32, 0)), 1.0);
        assert_eq!(a.resident(64, None), 24);
    }
}
