//! Internals the binary, the integration suite and the benchmarks reach by name; not the
//! library's API (hidden from its docs, no stability promised). Each item is listed, not its
//! module, so that the rest of each internal module stays under the dead-code lint.

pub use crate::env::{models_dir, user_cache_dir, user_data_dir};
pub use crate::logits::argmax;
pub use crate::quant::blocks::{as_blocks, fp16_to_f32, BlockQ8_1, QK8_1};

/// The CPU backend and the kernels the benchmarks time.
pub mod cpu {
    pub use crate::backend::cpu::attention::{attention, AttnParams, KvCache};
    pub use crate::backend::cpu::dot::Isa;
    pub use crate::backend::cpu::matmul::matmul;
    pub use crate::backend::cpu::ops::rms_norm;
    pub use crate::backend::cpu::pool::Pool;
    pub use crate::backend::cpu::{default_threads, CpuBackend};
}

/// What the GPU backends share: the kernel table and its variants, the schedule's spans, the
/// device profiles and the roofline plan (`plan`).
pub mod gpu {
    pub use crate::backend::gpu::cost::mma_step_instructions;
    pub use crate::backend::gpu::kernels::{
        act_qtype, all_variants, check_graph, Variant, MMA_COLS, MMA_ROWS, MMA_STEP, WEIGHT_QTYPES,
    };
    pub use crate::backend::gpu::params::{KernelParams, MatmulParams};
    pub use crate::backend::gpu::roofline;
    pub use crate::backend::gpu::schedule::{ATTN_TOKENS, SPLIT_SPAN, VEC_MAX_TOKENS};
    pub use crate::backend::gpu::shape::{DeviceProfile, Resources, Unit};
    pub use crate::backend::gpu::table::Kernel;
}

/// The wgpu backend built directly, and its WGSL assembly.
#[cfg(feature = "wgpu")]
pub mod wgpu {
    pub use crate::backend::wgpu::shaders::{
        attention16_probe_source, coop16_probe_source, f16_probe_source, quant_source, Coop, WgslSource, COOP_PROBE,
    };
    pub use crate::backend::wgpu::{WgpuBackend, WgpuOptions};
}

/// The CUDA backend built directly, its NVRTC programs and its CPU emulation.
#[cfg(feature = "cuda")]
pub mod cuda {
    pub use crate::backend::cuda::{emu, source, CudaBackend};
}
