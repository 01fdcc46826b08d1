//! What the CUDA backend needs of a device, and the one launch-parameter block every kernel
//! takes. Two devices implement it: the CUDA driver (`driver.rs`) and the CPU emulation of the
//! CUDA execution model (`emu.rs`), which runs the same kernels in tests on machines without
//! a GPU.

use crate::backend::gpu::kernels::Variant;
use crate::backend::gpu::shape::DeviceShape;
use crate::backend::gpu::table::Kernel;

/// The single argument of every kernel in `cuda/`: the buffers bound in the schedule's order
/// (`b[i]` is binding `i + 1`) and its 16 parameter words. `struct Params` in `cuda/common.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Params {
    pub b: [u64; 8],
    pub w: [u32; 16],
}

/// Device memory, freed when dropped.
pub struct DevBuf {
    pub ptr: u64,
    pub bytes: usize,
    pub(super) _owner: Box<dyn Send + Sync>,
}

/// A kernel ready to launch (an index into the device's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Func(pub(super) usize);

/// A device's loaded kernels, by variant and, for a tensor-core entry (`Variant::mma_entry`),
/// its tile width; `Func` indexes `funcs`.
pub struct FuncTable<F> {
    index: std::collections::HashMap<(Variant, Option<u32>), usize>,
    funcs: Vec<F>,
}

impl<F> Default for FuncTable<F> {
    fn default() -> FuncTable<F> {
        FuncTable {
            index: std::collections::HashMap::new(),
            funcs: Vec::new(),
        }
    }
}

impl<F> FuncTable<F> {
    /// `v`'s kernel (its tensor-core entry with tiles `mma_cols` wide, where given), loaded by
    /// `load` from its entry name on first use.
    pub fn get_or_load(
        &mut self,
        v: &Variant,
        mma_cols: Option<u32>,
        load: impl FnOnce(&str) -> Result<F, String>,
    ) -> Result<Func, String> {
        let key = (*v, mma_cols.filter(|_| v.has_mma()));
        if let Some(&i) = self.index.get(&key) {
            return Ok(Func(i));
        }
        let entry = key.1.and_then(|c| v.mma_entry(c)).unwrap_or_else(|| v.entry());
        let f = load(&entry)?;
        self.funcs.push(f);
        self.index.insert(key, self.funcs.len() - 1);
        Ok(Func(self.funcs.len() - 1))
    }

    pub fn get(&self, f: Func) -> Result<&F, String> {
        self.funcs.get(f.0).ok_or_else(|| "no such kernel".to_string())
    }
}

/// A recorded sequence of launches and copies, replayed as one unit (a CUDA graph).
pub trait Replay: Send {
    fn replay(&self) -> Result<(), String>;
}

/// Everything runs in order on one stream; `read` waits for what came before it.
pub trait Device: Send + Sync {
    /// `NVIDIA H200 (sm_90, 139.8 GiB)`.
    fn describe(&self) -> String;
    /// The device's shape: what the schedule sizes launches for.
    fn shape(&self) -> DeviceShape;
    /// Free device memory in bytes, where the device can tell.
    fn free_memory(&self) -> Option<u64>;
    /// `bytes` of zeroed memory.
    fn alloc(&self, bytes: usize) -> Result<DevBuf, String>;
    fn write(&self, dst: u64, data: &[u8]) -> Result<(), String>;
    fn read(&self, src: u64, out: &mut [u8]) -> Result<(), String>;
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), String>;
    /// The kernel of a variant (its tensor-core entry with tiles `mma_cols` wide, where given
    /// and `v` has one), compiled and loaded on first use.
    fn function(&self, v: &Variant, mma_cols: Option<u32>) -> Result<Func, String>;
    /// Launch kernels with programmatic dependent launch where the device has it (sm_90 and
    /// later; `cuda/common.cuh`'s `binding` waits for the kernel before). By default nothing.
    fn set_pdl(&self, on: bool) {
        let _ = on;
    }
    /// Launch the prefill matmul's tensor-core entries (`Variant::mma_entry`) where the device
    /// has them (sm_80 and later; the emulation), for kernels looked up from now on. By default
    /// nothing.
    fn set_mma(&self, on: bool) {
        let _ = on;
    }
    /// Whether `v` is launched as a tensor-core entry here (`set_mma` on, and `v` has one):
    /// then as `Variant::mma_launch` says.
    fn takes_mma(&self, v: &Variant) -> bool {
        let _ = v;
        false
    }
    /// Compiles the op files of `kernels` not compiled yet, side by side, ahead of the
    /// `function` calls that need them (a plan's kernels). By default nothing: the emulation
    /// builds every kernel at once.
    fn prepare(&self, kernels: &[Kernel]) -> Result<(), String> {
        let _ = kernels;
        Ok(())
    }
    fn launch(&self, f: Func, grid: [u32; 3], block: u32, p: &Params) -> Result<(), String>;
    /// Runs `run` and returns the device time of the work it submitted, in nanoseconds. By
    /// default wall time (the emulation's launches run as they are made); the driver
    /// brackets the work with events on its stream.
    fn timed(&self, run: &mut dyn FnMut() -> Result<(), String>) -> Result<f64, String> {
        let t = std::time::Instant::now();
        run()?;
        Ok(t.elapsed().as_nanos() as f64)
    }
    /// Records what `run` submits as a replayable graph, where the device has graphs (`None`:
    /// `run` was executed directly instead).
    fn capture(&self, run: &mut dyn FnMut() -> Result<(), String>) -> Result<Option<Box<dyn Replay>>, String> {
        run()?;
        Ok(None)
    }
}
