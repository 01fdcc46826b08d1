//! The CUDA C++ sources (`cuda/`) and their compilation: each op file is one NVRTC program,
//! `qtypes + common.cuh + quant.cuh + kv.cuh + <op>.cu` (no `#include`: nothing but NVRTC is
//! needed), where `qtypes` is the X-macro lists of qtypes generated from the qtype table
//! ([`qtype_lists`]), compiled to PTX for the device's compute capability at first use and cached
//! on disk by a hash of the program, the architecture and the NVRTC version.

use crate::backend::gpu::kernels::{VECTOR_QTYPES, WEIGHT_QTYPES};
use crate::backend::gpu::shape::Resources;
use crate::backend::gpu::table::Kernel;
use crate::quant::QType;

/// The headers every program starts with, in order.
pub const HEADERS: [(&str, &str); 3] = crate::backend::gpu::table::CUDA_HEADERS;

/// The name the emulator build gives the generated lists ([`qtype_lists`]) on disk.
pub const QTYPES_HEADER: &str = "qtypes.cuh";

/// The X-macro lists of the qtypes the kernels are instantiated for, from the qtype table:
/// `#define MF_MATRIX_QTYPES(X) X(f32) X(f16) ... X(mxfp4)` (every GPU weight type) and
/// `MF_VECTOR_QTYPES` (the float ones). The op files expand them into one entry point per type.
pub fn qtype_lists() -> String {
    let list = |name: &str, qs: &[QType]| {
        let xs: Vec<String> = qs.iter().map(|q| format!("X({})", q.name())).collect();
        format!("#define {name}(X) {}\n", xs.join(" "))
    };
    list("MF_MATRIX_QTYPES", &WEIGHT_QTYPES) + &list("MF_VECTOR_QTYPES", &VECTOR_QTYPES)
}

/// The op file of a kernel (`cuda/<name>.cu`, the name of the kernel and of its WGSL twin), as
/// its row of the kernel table holds it.
pub fn op_source(k: Kernel) -> &'static str {
    k.info().cuda
}

/// The whole NVRTC program of a kernel: the generated qtype lists, the headers, then its op file.
pub fn program(k: Kernel) -> String {
    let mut s = format!("// ---- {QTYPES_HEADER} (generated)\n{}\n", qtype_lists());
    for (name, src) in HEADERS {
        s += &format!("// ---- {name}\n{src}\n");
    }
    s += &format!("// ---- {}.cu\n{}", k.name(), op_source(k));
    s
}

/// FNV-1a: a hash that is the same in every build, for cache file names.
fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// NVRTC's version, or why it cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    // SAFETY: probing for the library only opens and closes it.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(
            "NVRTC not found (libnvrtc.so or libnvrtc.so.12; add the CUDA toolkit's library folder to LD_LIBRARY_PATH)"
                .into(),
        );
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-parameters; a missing symbol panics inside cudarc, which is contained.
    let rc = std::panic::catch_unwind(move || {
        let rc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        (rc, major, minor)
    })
    .map_err(|_| "NVRTC could not be loaded".to_string())?;
    if rc.0 != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("nvrtcVersion: {:?}", rc.0));
    }
    Ok((rc.1, rc.2))
}

/// Whether a driver of version `driver` (`cuDriverGetVersion`: 1000·major + 10·minor) loads
/// what NVRTC `nvrtc` (major, minor) writes for `target` (`target`): machine code (`sm_XX`)
/// needs a driver of the same major version or newer (CUDA's minor-version compatibility); PTX
/// carries the ISA version of the toolkit that wrote it, and a driver older than that toolkit
/// refuses it at module load (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) — after the gate chose CUDA
/// and the weights went up. The refusal names both versions.
pub fn check_driver(nvrtc: (i32, i32), driver: i32, target: &str) -> Result<(), String> {
    let d = (driver / 1000, (driver % 1000) / 10);
    let cubin = target.starts_with("sm_");
    if cubin && d.0 < nvrtc.0 {
        return Err(format!(
            "the CUDA driver supports CUDA {}.{} but NVRTC is {}.{}: its {target} code would not load \
             (update the driver, or put an NVRTC {}.x on LD_LIBRARY_PATH)",
            d.0, d.1, nvrtc.0, nvrtc.1, d.0
        ));
    }
    if !cubin && d < nvrtc {
        return Err(format!(
            "the CUDA driver supports CUDA {}.{} but NVRTC is {}.{}: its PTX would not load \
             (update the driver, or put an NVRTC of at most {}.{} on LD_LIBRARY_PATH)",
            d.0, d.1, nvrtc.0, nvrtc.1, d.0, d.1
        ));
    }
    Ok(())
}

/// The real architectures NVRTC writes machine code for (`nvrtcGetSupportedArchs`: 75, 80,
/// 86, 89, 90, …).
pub fn cubin_archs() -> Result<Vec<i32>, String> {
    use cudarc::nvrtc::sys;
    nvrtc_version()?;
    std::panic::catch_unwind(|| {
        let mut n = 0;
        // SAFETY: one out-parameter, then an array of the size it gave.
        unsafe {
            if sys::nvrtcGetNumSupportedArchs(&mut n) != sys::nvrtcResult::NVRTC_SUCCESS || n <= 0 {
                return Vec::new();
            }
            let mut v = vec![0; n as usize];
            if sys::nvrtcGetSupportedArchs(v.as_mut_ptr()) != sys::nvrtcResult::NVRTC_SUCCESS {
                return Vec::new();
            }
            v
        }
    })
    .map_err(|_| "NVRTC has no nvrtcGetSupportedArchs".to_string())
}

/// What the kernels of a device of compute capability `cc` are compiled for: its exact real
/// architecture (`sm_90`, CUBIN the driver loads as is) where NVRTC has it among `archs`, else
/// its virtual one (`compute_90`, PTX the driver compiles at every load).
pub fn target(cc: (i32, i32), archs: &[i32]) -> String {
    let n = cc.0 * 10 + cc.1;
    match archs.contains(&n) {
        true => format!("sm_{n}"),
        false => format!("compute_{n}"),
    }
}

/// What NVRTC made of a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Image {
    /// Machine code for one real architecture (an ELF image).
    Cubin(Vec<u8>),
    /// PTX for a virtual architecture.
    Ptx(String),
}

impl Image {
    fn bytes(&self) -> &[u8] {
        match self {
            Image::Cubin(b) => b,
            Image::Ptx(s) => s.as_bytes(),
        }
    }
}

/// Compiles `k`'s program for `target` (`sm_90`: CUBIN, `compute_90`: PTX), through the disk
/// cache when `cache` is set (keyed by the program, the target and the NVRTC version, so a
/// restart loads the image instead of compiling, and a CUBIN needs no JIT at load either).
pub fn compile(k: Kernel, target: &str, cache: bool) -> Result<Image, String> {
    let src = program(k);
    let cubin = target.starts_with("sm_");
    let path = match cache {
        true => cache_path(k, target)?,
        false => None,
    };
    if let Some(b) = path.as_ref().and_then(|p| std::fs::read(p).ok()) {
        match cubin {
            true => return Ok(Image::Cubin(b)),
            false => {
                if let Ok(s) = String::from_utf8(b) {
                    return Ok(Image::Ptx(s));
                }
            }
        }
    }
    let name = format!("{}.cu", k.name());
    let image = std::panic::catch_unwind(|| nvrtc(&src, &name, target, &[]))
        .map_err(|_| format!("{name}: NVRTC panicked"))??
        .0;
    if let Some(p) = path {
        // Best effort, written whole or not at all.
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
            let tmp = p.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, image.bytes()).is_ok() {
                let _ = std::fs::rename(&tmp, &p);
            }
        }
    }
    Ok(image)
}

/// Where `compile` keeps `k`'s image for `target` with this NVRTC (`None`: no cache directory).
pub fn cache_path(k: Kernel, target: &str) -> Result<Option<std::path::PathBuf>, String> {
    let (major, minor) = nvrtc_version()?;
    let ver = format!("{major}.{minor}");
    let src = program(k);
    Ok(crate::backend::cache_dir().map(|d| {
        let h = fnv64(&[src.as_bytes(), target.as_bytes(), ver.as_bytes()]);
        let ext = if target.starts_with("sm_") { "cubin" } else { "ptx" };
        d.join("cuda").join(format!("{}-{target}-{h:016x}.{ext}", k.name()))
    }))
}

/// One NVRTC compilation of `src` for `target`: CUBIN for `sm_XX`, PTX otherwise, with NVRTC's
/// log (what `extra` options such as `--ptxas-options=-v` make it say).
fn nvrtc(src: &str, name: &str, target: &str, extra: &[&str]) -> Result<(Image, String), String> {
    use cudarc::nvrtc::{result, sys};
    let c_src = std::ffi::CString::new(src).map_err(|_| format!("{name}: a NUL in the source"))?;
    let c_name = std::ffi::CString::new(name).map_err(|_| format!("{name}: a NUL in the name"))?;
    let prog = result::create_program(&c_src, Some(&c_name)).map_err(|e| format!("{name}: {e:?}"))?;
    let mut opts = vec![format!("--gpu-architecture={target}"), "--std=c++17".to_string()];
    opts.extend(extra.iter().map(|o| o.to_string()));
    // SAFETY: `prog` was created above and is destroyed once, at the end; the buffers passed
    // to NVRTC are sized by the calls that precede them.
    let out = unsafe {
        let out = match result::compile_program(prog, &opts) {
            Err(e) => {
                let log = result::get_program_log(prog).unwrap_or_default();
                let log = std::ffi::CStr::from_ptr(log.as_ptr()).to_string_lossy().into_owned();
                Err(format!("{name} for {target} ({e:?}):\n{log}"))
            }
            Ok(()) if target.starts_with("sm_") => {
                let mut n = 0usize;
                let mut b = Vec::new();
                let rc = match sys::nvrtcGetCUBINSize(prog, &mut n) {
                    sys::nvrtcResult::NVRTC_SUCCESS => {
                        b.resize(n, 0u8);
                        sys::nvrtcGetCUBIN(prog, b.as_mut_ptr().cast())
                    }
                    rc => rc,
                };
                match rc {
                    sys::nvrtcResult::NVRTC_SUCCESS => Ok(Image::Cubin(b)),
                    rc => Err(format!("{name} for {target}: nvrtcGetCUBIN: {rc:?}")),
                }
            }
            Ok(()) => result::get_ptx(prog)
                .map_err(|e| format!("{name} for {target}: nvrtcGetPTX: {e:?}"))
                .map(|p| Image::Ptx(std::ffi::CStr::from_ptr(p.as_ptr()).to_string_lossy().into_owned())),
        };
        let log = result::get_program_log(prog)
            .map(|l| std::ffi::CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
            .unwrap_or_default();
        let _ = result::destroy_program(prog);
        out.map(|image| (image, log))
    };
    out
}

/// Registers, spilled bytes and static workgroup memory of every kernel entry of every op
/// file compiled to machine code for `arch` (`sm_90`), as ptxas reports them
/// (`--ptxas-options=-v`): the op files compiled side by side on threads, the report cached on
/// disk by the programs, the architecture and the NVRTC version.
pub fn resources(arch: &str) -> Result<std::collections::HashMap<String, Resources>, String> {
    let (major, minor) = nvrtc_version()?;
    if !arch.starts_with("sm_") {
        return Err(format!(
            "{arch}: registers are reported for a real architecture (sm_XX)"
        ));
    }
    let programs: Vec<(Kernel, String)> = Kernel::ALL.iter().map(|&k| (k, program(k))).collect();
    let ver = format!("{major}.{minor}");
    let mut parts: Vec<&[u8]> = programs.iter().map(|p| p.1.as_bytes()).collect();
    parts.extend([arch.as_bytes(), ver.as_bytes()]);
    let path = crate::backend::cache_dir().map(|d| {
        d.join("cuda")
            .join(format!("resources-{arch}-{:016x}.json", fnv64(&parts)))
    });
    if let Some(r) = path
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
    {
        return Ok(r);
    }
    let logs: Vec<Result<String, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = programs
            .iter()
            .map(|(k, src)| {
                s.spawn(move || {
                    let name = format!("{}.cu", k.name());
                    std::panic::catch_unwind(|| nvrtc(src, &name, arch, &["--ptxas-options=-v"]))
                        .map_err(|_| format!("{name}: NVRTC panicked"))?
                        .map(|(_, log)| log)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a compile thread panicked".into())))
            .collect()
    });
    let mut out = std::collections::HashMap::new();
    for log in logs {
        out.extend(parse_ptxas(&log?));
    }
    if let Some(p) = path {
        if let (Some(dir), Ok(json)) = (p.parent(), serde_json::to_vec(&out)) {
            let _ = std::fs::create_dir_all(dir);
            let tmp = p.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, json).is_ok() {
                let _ = std::fs::rename(&tmp, &p);
            }
        }
    }
    Ok(out)
}

/// Each entry's resources from a ptxas `-v` log: `Compiling entry function 'NAME'`, then its
/// `N bytes spill stores` and `Used N registers, … N bytes smem` lines.
pub fn parse_ptxas(log: &str) -> Vec<(String, Resources)> {
    let mut out: Vec<(String, Resources)> = Vec::new();
    let number_before = |line: &str, unit: &str| -> Option<u32> {
        let i = line.find(unit)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push((
                name,
                Resources {
                    registers: 0,
                    shared: 0,
                    spill: 0,
                },
            ));
        } else if let Some((_, r)) = out.last_mut() {
            if line.contains("spill stores") {
                r.spill = number_before(line, "bytes spill stores").unwrap_or(0);
            } else if line.contains("Used") && line.contains("registers") {
                r.registers = number_before(line, "registers").unwrap_or(0);
                r.shared = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVRTC 12.9 (the pinned wheel) on a 12.4 driver: its PTX refused, both versions named,
    /// its CUBIN taken (same major version); on its own driver and newer ones (13.0) both
    /// taken; NVRTC 13 on a 12.x driver refused either way.
    #[test]
    fn a_driver_older_than_nvrtc_is_refused_by_both_versions() {
        let e = check_driver((12, 9), 12040, "compute_90").unwrap_err();
        assert!(e.contains("CUDA 12.4") && e.contains("NVRTC is 12.9"), "{e}");
        assert!(check_driver((12, 9), 12040, "sm_90").is_ok());
        for t in ["compute_90", "sm_90"] {
            assert!(check_driver((12, 9), 12090, t).is_ok());
            assert!(check_driver((12, 9), 13000, t).is_ok());
            assert!(check_driver((12, 4), 12040, t).is_ok());
            let e = check_driver((13, 0), 12090, t).unwrap_err();
            assert!(e.contains("CUDA 12.9") && e.contains("NVRTC is 13.0"), "{e}");
        }
    }

    /// ptxas's `-v` lines as NVRTC 12.9 writes them, an entry without workgroup memory among
    /// them.
    #[test]
    fn ptxas_reports_parse_per_entry() {
        let log = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'rms_norm_f32' for 'sm_90'
ptxas info    : Function properties for rms_norm_f32
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 16 bytes smem
ptxas info    : Compile time = 7.138 ms
ptxas info    : Compiling entry function 'matmul_mma64_q4_K' for 'sm_90'
ptxas info    : Function properties for matmul_mma64_q4_K
ptxas         .     8 bytes stack frame, 12 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 116 registers, used 1 barriers, 16384 bytes smem
ptxas info    : Compiling entry function 'add' for 'sm_90'
ptxas info    : Function properties for add
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers
";
        let r = parse_ptxas(log);
        let res = |registers, shared, spill| Resources {
            registers,
            shared,
            spill,
        };
        assert_eq!(
            r,
            [
                ("rms_norm_f32".to_string(), res(32, 16, 0)),
                ("matmul_mma64_q4_K".to_string(), res(116, 16384, 12)),
                ("add".to_string(), res(12, 0, 0)),
            ]
        );
    }

    /// The exact architecture where NVRTC writes machine code for it, else PTX.
    #[test]
    fn cubin_for_the_architectures_nvrtc_has() {
        let archs = [75, 80, 86, 89, 90, 100, 120];
        assert_eq!(target((9, 0), &archs), "sm_90");
        assert_eq!(target((8, 6), &archs), "sm_86");
        assert_eq!(target((6, 1), &archs), "compute_61");
        assert_eq!(target((12, 1), &archs), "compute_121");
    }

    /// The qtype lists exist only as generated from the table: no source defines its own copy,
    /// and every program starts with the generated one.
    #[test]
    fn qtype_lists_are_generated_not_written() {
        let sources = HEADERS.iter().map(|&(name, src)| (name.to_string(), src));
        let ops = Kernel::ALL.iter().map(|&k| (format!("{}.cu", k.name()), op_source(k)));
        for (name, src) in sources.chain(ops) {
            for list in ["MF_MATRIX_QTYPES", "MF_VECTOR_QTYPES"] {
                assert!(
                    !src.contains(&format!("#define {list}")),
                    "cuda/{name} defines {list} by hand"
                );
            }
        }
        let lists = qtype_lists();
        assert!(
            lists.starts_with("#define MF_MATRIX_QTYPES(X) X(f32) X(f16) X(bf16) X(q4_0) "),
            "{lists}"
        );
        assert!(lists.contains("X(q6_K) X(iq4_nl) X(mxfp4)\n#define MF_VECTOR_QTYPES(X) X(f32) X(f16) X(bf16)\n"));
        for q in QType::ALL {
            assert_eq!(lists.contains(&format!("X({})", q.name())), q.has_gpu_kernel(), "{q}");
        }
        assert!(program(Kernel::MatmulVec).starts_with(&format!("// ---- {QTYPES_HEADER} (generated)\n{lists}")));
    }
}
