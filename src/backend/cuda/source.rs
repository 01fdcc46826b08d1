//! The CUDA C++ sources (`cuda/`) and their compilation: each op file is one NVRTC program,
//! `qtypes + common.cuh + quant.cuh + kv.cuh + <op>.cu` (no `#include`: nothing but NVRTC is
//! needed), where `qtypes` is the X-macro lists of qtypes generated from the qtype table
//! ([`qtype_lists`]), compiled to PTX for the device's compute capability at first use and cached
//! on disk by a hash of the program, the architecture and the NVRTC version.

use crate::backend::gpu::kernels::{Kernel, VECTOR_QTYPES, WEIGHT_QTYPES};
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
/// the PTX of NVRTC `nvrtc` (major, minor): PTX carries the ISA version of the toolkit that
/// wrote it, and a driver older than that toolkit refuses it at module load
/// (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) — after the gate chose CUDA and the weights went up.
/// The refusal names both versions.
pub fn check_driver(nvrtc: (i32, i32), driver: i32) -> Result<(), String> {
    let d = (driver / 1000, (driver % 1000) / 10);
    if d < nvrtc {
        return Err(format!(
            "the CUDA driver supports CUDA {}.{} but NVRTC is {}.{}: its PTX would not load \
             (update the driver, or put an NVRTC of at most {}.{} on LD_LIBRARY_PATH)",
            d.0, d.1, nvrtc.0, nvrtc.1, d.0, d.1
        ));
    }
    Ok(())
}

/// Compiles `k`'s program to PTX for `arch` (`compute_90`), through the disk cache when
/// `cache` is set.
pub fn compile(k: Kernel, arch: &str, cache: bool) -> Result<String, String> {
    let src = program(k);
    let (major, minor) = nvrtc_version()?;
    let ver = format!("{major}.{minor}");
    let path = cache.then(crate::backend::cache_dir).flatten().map(|d| {
        let h = fnv64(&[src.as_bytes(), arch.as_bytes(), ver.as_bytes()]);
        d.join("cuda").join(format!("{}-{arch}-{h:016x}.ptx", k.name()))
    });
    if let Some(ptx) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
        return Ok(ptx);
    }
    let opts = cudarc::nvrtc::CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()],
        name: Some(format!("{}.cu", k.name())),
        ..Default::default()
    };
    let ptx = std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(&src, opts))
        .map_err(|_| format!("{}.cu: NVRTC panicked", k.name()))?
        .map_err(|e| match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                format!("{}.cu for {arch}:\n{}", k.name(), log.to_string_lossy())
            }
            e => format!("{}.cu for {arch}: {e}", k.name()),
        })?
        .to_src();
    if let Some(p) = path {
        // Best effort, written whole or not at all.
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
            let tmp = p.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, &ptx).is_ok() {
                let _ = std::fs::rename(&tmp, &p);
            }
        }
    }
    Ok(ptx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVRTC 12.9 (the pinned wheel) on a 12.4 driver: refused, both versions named; on its
    /// own driver and newer ones (13.0) taken.
    #[test]
    fn a_driver_older_than_nvrtc_is_refused_by_both_versions() {
        let e = check_driver((12, 9), 12040).unwrap_err();
        assert!(e.contains("CUDA 12.4") && e.contains("NVRTC is 12.9"), "{e}");
        assert!(check_driver((12, 9), 12090).is_ok());
        assert!(check_driver((12, 9), 13000).is_ok());
        assert!(check_driver((12, 4), 12040).is_ok());
        assert!(check_driver((13, 0), 12090).is_err());
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
