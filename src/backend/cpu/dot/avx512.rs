//! AVX-512 kernels: the AVX2 bodies recompiled with AVX-512 VNNI (`vpdpbusd` / `vpdpwssd` in
//! place of `maddubs + madd`, as ggml does under `__AVX512VNNI__ && __AVX512VL__`).
//!
//! The tier needs AVX-512 F, BW, VL and VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later);
//! a CPU with AVX-512 but no VNNI takes the AVX2 tier.

use super::{avx2, dot_table, scalar, x4_table, Kernels, N_TYPES};

pub(super) fn supported() -> bool {
    avx2::supported()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

pub(super) static KERNELS: Kernels = Kernels {
    isa: "avx512",
    dot: dot_table(dot_table([None; N_TYPES], &scalar::DOT), &inst::DOT),
    dot_x4: x4_table([None; N_TYPES], &inst::DOT_X4),
    q8_0: |x, out| unsafe { avx2::quantize_q8_0(x, out) },
    q8_1: |x, out| unsafe { avx2::quantize_q8_1(x, out) },
    q8_k: |x, out| unsafe { avx2::quantize_q8_k(x, out) },
};

mod inst {
    use super::super::avx2::*;
    use super::super::{dot_fn, dot_x4_fn, DotFn, DotX4Fn};
    use crate::quant::QType;

    instantiate!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", true);
}
