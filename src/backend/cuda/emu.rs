//! The CUDA kernels run on the CPU: `cuda/` compiled by the system C++ compiler against
//! `cuda/emu/emu.h` (blocks on OS threads, threads as fibers, barriers and warp shuffles
//! emulated) into a shared library, loaded here as a `Device`. The backend above it is the
//! real one — schedule, weights, launches, readback — so tests check the kernels and the
//! whole path from gate to readback on machines without a GPU. Slow; for tests and kernel
//! work, never auto-selected.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::device::{DevBuf, Device, Func, FuncTable, Params};
use super::source::{qtype_lists, HEADERS, QTYPES_HEADER};
use crate::backend::gpu::kernels::Variant;
use crate::backend::gpu::shape::DeviceShape;
use crate::backend::gpu::table::Kernel;

/// The device the emulation stands for.
pub const EMULATED_SHAPE: DeviceShape = DeviceShape {
    sms: 16,
    max_threads: 1024,
    subgroup: 32,
    shared_bytes: 48 * 1024,
    max_groups: 65535,
    matrix_tiles: true,
    coop_f16: false,
};

type LaunchFn = unsafe extern "C" fn(*const c_void, *const c_uint, *const c_uint, *const c_void) -> c_int;
type ErrorFn = unsafe extern "C" fn() -> *const c_char;

/// Host memory standing in for device memory; 64-byte aligned, zeroed.
struct HostMem {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: a plain allocation, written only through the device's in-order operations.
unsafe impl Send for HostMem {}
unsafe impl Sync for HostMem {}

impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `Emulator::alloc`.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

pub struct Emulator {
    lib: libloading::Library,
    launch: LaunchFn,
    error: ErrorFn,
    funcs: Mutex<FuncTable<usize>>,
    /// The prefill matmul takes its tensor-core entries (emulated; `Device::set_mma`).
    mma: AtomicBool,
}

impl Emulator {
    /// Loads an emulator library built by [`build`].
    pub fn load(path: &Path) -> Result<Emulator, String> {
        // SAFETY: the library is ours (built by `build`); its initialisers do nothing unusual.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| format!("{}: {e}", path.display()))?;
        // SAFETY: the symbols have these C signatures (cuda/emu/emu.cpp).
        let (launch, error) = unsafe {
            let l: libloading::Symbol<LaunchFn> = lib
                .get(b"minfer_emu_launch\0")
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let e: libloading::Symbol<ErrorFn> = lib
                .get(b"minfer_emu_error\0")
                .map_err(|e| format!("{}: {e}", path.display()))?;
            (*l, *e)
        };
        Ok(Emulator {
            lib,
            launch,
            error,
            funcs: Mutex::new(FuncTable::default()),
            mma: AtomicBool::new(true),
        })
    }
}

impl Device for Emulator {
    fn describe(&self) -> String {
        "CPU emulation of the CUDA kernels".into()
    }

    /// A small GPU's: launches sized as on a real device, at a count the emulation runs fast.
    fn shape(&self) -> DeviceShape {
        DeviceShape {
            matrix_tiles: self.mma.load(Ordering::Relaxed),
            ..EMULATED_SHAPE
        }
    }

    fn free_memory(&self) -> Option<u64> {
        None
    }

    fn alloc(&self, bytes: usize) -> Result<DevBuf, String> {
        let n = bytes.max(16).div_ceil(64) * 64;
        let layout = std::alloc::Layout::from_size_align(n, 64).map_err(|e| e.to_string())?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(format!("allocating {n} bytes failed"));
        }
        Ok(DevBuf {
            ptr: ptr as u64,
            bytes: n,
            _owner: Box::new(HostMem { ptr, layout }),
        })
    }

    fn write(&self, dst: u64, data: &[u8]) -> Result<(), String> {
        // SAFETY: `dst..dst + len` lies in a live `HostMem` (the callers' `DevBuf`s).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len()) };
        Ok(())
    }

    fn read(&self, src: u64, out: &mut [u8]) -> Result<(), String> {
        // SAFETY: as `write`.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), String> {
        // SAFETY: as `write`; `Output` copies never overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
        Ok(())
    }

    fn function(&self, v: &Variant, mma_cols: Option<u32>) -> Result<Func, String> {
        let mut f = self.funcs.lock().map_err(|_| "function table poisoned".to_string())?;
        f.get_or_load(v, mma_cols.filter(|_| self.takes_mma(v)), |entry| {
            let sym = format!("{entry}\0");
            // SAFETY: only the address is taken; it is called with the kernels' signature.
            let addr = unsafe { self.lib.get::<*const c_void>(sym.as_bytes()) }
                .map_err(|_| format!("{}.cu has no kernel {entry}", v.kernel.name()))?;
            Ok(*addr as usize)
        })
    }

    fn set_mma(&self, on: bool) {
        self.mma.store(on, Ordering::Relaxed);
    }

    fn takes_mma(&self, v: &Variant) -> bool {
        self.mma.load(Ordering::Relaxed) && v.has_mma()
    }

    fn launch(&self, f: Func, grid: [u32; 3], block: u32, p: &Params) -> Result<(), String> {
        let addr = {
            let funcs = self.funcs.lock().map_err(|_| "function table poisoned".to_string())?;
            *funcs.get(f)?
        };
        let blk = [block, 1, 1];
        // SAFETY: `addr` is a kernel taking one `Params`; grid and block are plain arrays.
        let rc = unsafe {
            (self.launch)(
                addr as *const c_void,
                grid.as_ptr(),
                blk.as_ptr(),
                p as *const Params as *const c_void,
            )
        };
        if rc != 0 {
            // SAFETY: a NUL-terminated message owned by the library.
            let msg = unsafe { CStr::from_ptr((self.error)()) };
            return Err(msg.to_string_lossy().into_owned());
        }
        Ok(())
    }
}

/// Builds the emulator library from the sources in `cuda/` and the generated qtype lists
/// (written to `dir` first) into `dir` (with `$CXX`, else `g++`), one translation unit per op
/// file. Returns the library's path.
pub fn build(cuda_dir: &Path, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let out = dir.join(format!("libminfer_cuda_emu{}", std::env::consts::DLL_SUFFIX));
    let cxx_path = crate::env::cxx();
    let cxx = cxx_path.to_string_lossy();
    let mut cmd = std::process::Command::new(&cxx_path);
    cmd.args(["-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-w"]);
    cmd.arg("-include").arg(cuda_dir.join("emu/emu.h"));
    // The qtype lists NVRTC programs start with, generated from the qtype table.
    let lists = dir.join(QTYPES_HEADER);
    std::fs::write(&lists, qtype_lists()).map_err(|e| format!("{}: {e}", lists.display()))?;
    cmd.arg("-include").arg(&lists);
    for (name, _) in HEADERS {
        cmd.arg("-include").arg(cuda_dir.join(name));
    }
    cmd.args(["-x", "c++"]);
    for k in Kernel::ALL {
        cmd.arg(cuda_dir.join(format!("{}.cu", k.name())));
    }
    // emu.cpp is plain C++ and must not see the force-included CUDA headers' definitions
    // twice; it guards itself.
    cmd.arg(cuda_dir.join("emu/emu.cpp"));
    cmd.arg("-o").arg(&out);
    let res = cmd.output().map_err(|e| format!("{cxx}: {e}"))?;
    if !res.status.success() {
        return Err(format!(
            "{cxx} failed building the CUDA emulator:\n{}",
            String::from_utf8_lossy(&res.stderr)
        ));
    }
    Ok(out)
}
