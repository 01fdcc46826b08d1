// Weight dequantization, one traits struct per qtype of the table in src/quant/ (named qt_<name>
// after QType::name()). Ported from shaders/quant/*.wgsl and checked against the scalar codecs
// of src/quant/*.rs: every value is bit-identical to the CPU's dequantization. Interface:
//   QK, QB          elements and bytes per block (float types: a virtual block of 8)
//   dq8(w, b, c)    elements 8c .. 8c + 8 of the block starting at byte b of `w`
//   dq1(w, i)       element i of `w` (float types only: norm weights, biases)
// `w` is a raw GGUF weight: one part's rows back to back, its start at least 16-byte aligned.
// Blocks sit at multiples of QB from that start, so each field's alignment is known per type and
// every load is the widest one that alignment allows (16-bit fields always sit at even offsets).
// Eight quant bytes at an offset that isn't a multiple of 8 come from the two aligned words around
// them (ld_u64_1), which may reach into the neighbouring block or the padding after the weight;
// every other load stays inside the block it decodes.
// q8_1 and q8_K are activation formats that no kernel reads as weights; their dq8 is here for
// completeness.
//
// Element layouts, with e the element index in the block:
//   q4_0 / q4_1 / iq4_nl / mxfp4  e < 16: low nibble of qs[e], e >= 16: high nibble of qs[e-16]
//   q5_0 / q5_1                   as q4_*, bit 4 from bit e of qh
//   q2_K / q3_K / q6_K            e = 128h + 32k + l: bits 2k.. of byte l of the h-th 32-byte
//                                 quant group (q6_K: nibble (k >> 1) of its ql, 2 bits of qh)
//   q4_K / q5_K                   e = 64g + 32hi + l: nibble hi of qs[32g + l]

// ---- byte readers ------------------------------------------------------------------------------

[[maybe_unused]] static __device__ __forceinline__ u32 ld_u8(const u8* __restrict__ w, u32 b) {
    return w[b];
}

// b even
[[maybe_unused]] static __device__ __forceinline__ u32 ld_u16(const u8* __restrict__ w, u32 b) {
    return *reinterpret_cast<const u16*>(w + b);
}

[[maybe_unused]] static __device__ __forceinline__ float ld_f16(const u8* __restrict__ w, u32 b) {
    return f16_to_f32(ld_u16(w, b));
}

// Little-endian u32 at b, b % 4 == 0.
[[maybe_unused]] static __device__ __forceinline__ u32 ld_u32_4(const u8* __restrict__ w, u32 b) {
    return *reinterpret_cast<const u32*>(w + b);
}

// The two f16 at b, b % 4 == 0 (a block's d and min), in one load.
[[maybe_unused]] static __device__ __forceinline__ f2 ld_f16x2(const u8* __restrict__ w, u32 b) {
    const u32 v = ld_u32_4(w, b);
    return f2{f16_to_f32(v & 0xffffu), f16_to_f32(v >> 16)};
}

// Little-endian u32 at an even b: two 16-bit loads.
[[maybe_unused]] static __device__ __forceinline__ u32 ld_u32_2(const u8* __restrict__ w, u32 b) {
    const u16* h = reinterpret_cast<const u16*>(w + b);
    return (u32)h[0] | ((u32)h[1] << 16);
}

// Little-endian u32 at any b: four byte loads.
[[maybe_unused]] static __device__ __forceinline__ u32 ld_u32_1(const u8* __restrict__ w, u32 b) {
    return (u32)w[b] | ((u32)w[b + 1] << 8) | ((u32)w[b + 2] << 16) | ((u32)w[b + 3] << 24);
}

// 8 bytes at b, b % 8 == 0, as two little-endian u32.
[[maybe_unused]] static __device__ __forceinline__ u2 ld_u64_8(const u8* __restrict__ w, u32 b) {
    return *reinterpret_cast<const u2*>(w + b);
}

// 8 bytes at any b, as two little-endian u32: the two aligned 8-byte words around them (two loads
// where ld_u32_2 takes four and ld_u32_1 eight), shifted together. The words reach at most 7
// bytes before b, never before the 16-byte-aligned start of `w`, and at most 8 past b + 8,
// inside the zeroed bytes after every weight (CUDA_PAD).
[[maybe_unused]] static __device__ __forceinline__ u2 ld_u64_1(const u8* __restrict__ w, u32 b) {
    const unsigned long long at = reinterpret_cast<unsigned long long>(w + b);
    const u2* __restrict__ p = reinterpret_cast<const u2*>(at & ~7ull);
    const u2 lo = p[0], hi = p[1];
    const u32 o = (u32)at & 7u, sh = 8 * (o & 3u);
    const bool up = o >= 4;
    const u32 a = up ? lo.y : lo.x, m = up ? hi.x : lo.y, c = up ? hi.y : hi.x;
    return u2{__funnelshift_r(a, m, sh), __funnelshift_r(m, c, sh)};
}

// 16 bytes at b, b % 16 == 0, as four little-endian u32.
[[maybe_unused]] static __device__ __forceinline__ u4 ld_u128_16(const u8* __restrict__ w, u32 b) {
    return *reinterpret_cast<const u4*>(w + b);
}

// The 4 bits of v (0..15) spread to the lowest bit of each byte: bit j -> bit 8j.
[[maybe_unused]] static __device__ __forceinline__ u32 spread4(u32 v) {
    return (v & 1u) | ((v & 2u) << 7) | ((v & 4u) << 14) | ((v & 8u) << 21);
}

// ---- float types -------------------------------------------------------------------------------

// f32 weights.
struct qt_f32 {
    static constexpr u32 QK = 8, QB = 32;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32) {
        const f4* v = reinterpret_cast<const f4*>(w + b);
        return f4x2{v[0], v[1]};
    }
    static __device__ __forceinline__ float dq1(const u8* __restrict__ w, u32 i) {
        return reinterpret_cast<const float*>(w)[i];
    }
};

// f16 weights: two halves per word, low half first.
struct qt_f16 {
    static constexpr u32 QK = 8, QB = 16;
    static __device__ __forceinline__ f4 half4(u32 a, u32 b) {
        return f4{f16_to_f32(a & 0xffffu), f16_to_f32(a >> 16), f16_to_f32(b & 0xffffu), f16_to_f32(b >> 16)};
    }
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32) {
        const u4 q = ld_u128_16(w, b);
        return f4x2{half4(q.x, q.y), half4(q.z, q.w)};
    }
    static __device__ __forceinline__ float dq1(const u8* __restrict__ w, u32 i) {
        return f16_to_f32(ld_u16(w, 2 * i));
    }
};

// bf16 weights: the high half of an f32, exact.
struct qt_bf16 {
    static constexpr u32 QK = 8, QB = 16;
    static __device__ __forceinline__ f4 bf4(u32 a, u32 b) {
        return f4{__uint_as_float(a << 16), __uint_as_float(a & 0xffff0000u), __uint_as_float(b << 16),
                  __uint_as_float(b & 0xffff0000u)};
    }
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32) {
        const u4 q = ld_u128_16(w, b);
        return f4x2{bf4(q.x, q.y), bf4(q.z, q.w)};
    }
    static __device__ __forceinline__ float dq1(const u8* __restrict__ w, u32 i) {
        return bf16_to_f32(ld_u16(w, 2 * i));
    }
};

// ---- 32-element formats ------------------------------------------------------------------------

// q4_0, 18 bytes / 32: d f16 | qs[16]. x = d·(q − 8). ggml: dequantize_row_q4_0.
struct qt_q4_0 {
    static constexpr u32 QK = 32, QB = 18;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const float d = ld_f16(w, b);
        const u32 o = b + 2 + (c & 1) * 8;
        const u32 sh = (c >> 1) * 4;
        const u2 v = ld_u64_1(w, o);
        const u32 q0 = (v.x >> sh) & 0x0f0f0f0fu;
        const u32 q1 = (v.y >> sh) & 0x0f0f0f0fu;
        return f4x2{scale4(u8x4<8>(q0), d), scale4(u8x4<8>(q1), d)};
    }
};

// q4_1, 20 bytes / 32: d f16 | m f16 | qs[16]. x = d·q + m. ggml: dequantize_row_q4_1.
struct qt_q4_1 {
    static constexpr u32 QK = 32, QB = 20;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const float d = ld_f16(w, b);
        const float m = ld_f16(w, b + 2);
        const u32 o = b + 4 + (c & 1) * 8;
        const u32 sh = (c >> 1) * 4;
        const u32 q0 = (ld_u32_4(w, o) >> sh) & 0x0f0f0f0fu;
        const u32 q1 = (ld_u32_4(w, o + 4) >> sh) & 0x0f0f0f0fu;
        return f4x2{mul_add4(u8x4<0>(q0), d, m), mul_add4(u8x4<0>(q1), d, m)};
    }
};

// Bit 4 of elements 8c .. 8c + 8 of a q5 block (bit e of qh), as 16 in bytes 0..3 of each word.
[[maybe_unused]] static __device__ __forceinline__ u2 q5_high(u32 qh, u32 c) {
    const u32 bits = qh >> (8 * c);
    return u2{spread4(bits & 0xfu) << 4, spread4((bits >> 4) & 0xfu) << 4};
}

// q5_0, 22 bytes / 32: d f16 | qh u32 | qs[16]. x = d·(q − 16). ggml: dequantize_row_q5_0.
struct qt_q5_0 {
    static constexpr u32 QK = 32, QB = 22;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const float d = ld_f16(w, b);
        const u2 h = q5_high(ld_u32_2(w, b + 2), c);
        const u32 o = b + 6 + (c & 1) * 8;
        const u32 sh = (c >> 1) * 4;
        const u2 v = ld_u64_1(w, o);
        const u32 q0 = ((v.x >> sh) & 0x0f0f0f0fu) | h.x;
        const u32 q1 = ((v.y >> sh) & 0x0f0f0f0fu) | h.y;
        return f4x2{scale4(u8x4<16>(q0), d), scale4(u8x4<16>(q1), d)};
    }
};

// q5_1, 24 bytes / 32: d f16 | m f16 | qh u32 | qs[16]. x = d·q + m. ggml: dequantize_row_q5_1.
struct qt_q5_1 {
    static constexpr u32 QK = 32, QB = 24;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const float d = ld_f16(w, b);
        const float m = ld_f16(w, b + 2);
        const u2 h = q5_high(ld_u32_4(w, b + 4), c);
        const u2 q = ld_u64_8(w, b + 8 + (c & 1) * 8);
        const u32 sh = (c >> 1) * 4;
        const u32 q0 = ((q.x >> sh) & 0x0f0f0f0fu) | h.x;
        const u32 q1 = ((q.y >> sh) & 0x0f0f0f0fu) | h.y;
        return f4x2{mul_add4(u8x4<0>(q0), d, m), mul_add4(u8x4<0>(q1), d, m)};
    }
};

// q8_0, 34 bytes / 32: d f16 | qs[32] i8. x = d·q. ggml: dequantize_row_q8_0.
struct qt_q8_0 {
    static constexpr u32 QK = 32, QB = 34;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const float d = ld_f16(w, b);
        const u32 o = b + 2 + c * 8;
        const u2 v = ld_u64_1(w, o);
        return f4x2{scale4(i8x4(v.x), d), scale4(i8x4(v.y), d)};
    }
};

// q8_1, 36 bytes / 32: d f16 | s f16 | qs[32] i8. x = d·q (s is redundant). The CPU's
// dequant_q8_1 (ggml has no to_float for it).
struct qt_q8_1 {
    static constexpr u32 QK = 32, QB = 36;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const float d = ld_f16(w, b);
        const u32 o = b + 4 + c * 8;
        return f4x2{scale4(i8x4(ld_u32_4(w, o)), d), scale4(i8x4(ld_u32_4(w, o + 4)), d)};
    }
};

// iq4_nl, 18 bytes / 32: d f16 | qs[16]. x = d·kvalues[q]; nibbles as q4_0.
// ggml: dequantize_row_iq4_nl.
struct qt_iq4_nl {
    static constexpr u32 QK = 32, QB = 18;
    // kvalues_iq4nl as signed bytes: entries 0..7 in LO, 8..15 in HI, entry 0 in the low byte.
    static constexpr unsigned long long LO = 0xf6eaddcfbfad9881ull; // -127 -104 -83 -65 -49 -35 -22 -10
    static constexpr unsigned long long HI = 0x7159453526190d01ull; //    1   13  25  38  53  69  89 113
    static __device__ __forceinline__ float kv(u32 q) {
        return i8f((u32)(((q & 8u) ? HI : LO) >> (8 * (q & 7u))));
    }
    static __device__ __forceinline__ f4 kv4(u32 q, float d) {
        return f4{kv(q & 0xfu) * d, kv((q >> 8) & 0xfu) * d, kv((q >> 16) & 0xfu) * d, kv((q >> 24) & 0xfu) * d};
    }
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const float d = ld_f16(w, b);
        const u32 o = b + 2 + (c & 1) * 8;
        const u32 sh = (c >> 1) * 4;
        const u2 v = ld_u64_1(w, o);
        return f4x2{kv4(v.x >> sh, d), kv4(v.y >> sh, d)};
    }
};

// ggml_e8m0_to_fp32_half: 2^(e − 128); e < 2 gives the subnormals 2^-128, 2^-127.
[[maybe_unused]] static __device__ __forceinline__ float e8m0_half(u32 e) {
    return e < 2u ? __uint_as_float(0x00200000u << e) : __uint_as_float((e - 1u) << 23);
}

// mxfp4, 17 bytes / 32: e u8 (e8m0) | qs[16]. x = 2^(e − 128)·kvalues[q] (doubled e2m1 values with
// a halved scale); nibbles as q4_0. Blocks start at odd offsets. ggml: dequantize_row_mxfp4.
struct qt_mxfp4 {
    static constexpr u32 QK = 32, QB = 17;
    // kvalues_mxfp4 as signed bytes: entries 0..7 in LO, 8..15 in HI.
    static constexpr unsigned long long LO = 0x0c08060403020100ull; // 0  1  2  3  4  6  8  12
    static constexpr unsigned long long HI = 0xf4f8fafcfdfeff00ull; // 0 -1 -2 -3 -4 -6 -8 -12
    static __device__ __forceinline__ float kv(u32 q) {
        return i8f((u32)(((q & 8u) ? HI : LO) >> (8 * (q & 7u))));
    }
    static __device__ __forceinline__ f4 kv4(u32 q, float d) {
        return f4{kv(q & 0xfu) * d, kv((q >> 8) & 0xfu) * d, kv((q >> 16) & 0xfu) * d, kv((q >> 24) & 0xfu) * d};
    }
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const float d = e8m0_half(ld_u8(w, b));
        const u32 o = b + 1 + (c & 1) * 8;
        const u32 sh = (c >> 1) * 4;
        const u2 v = ld_u64_1(w, o);
        return f4x2{kv4(v.x >> sh, d), kv4(v.y >> sh, d)};
    }
};

// ---- K-quants (256-element super-blocks) -------------------------------------------------------

// q2_K, 84 bytes / 256: scales[16] (scale | min << 4) | qs[64] | d f16 | dmin f16.
// Element 128h + 32k + l: q = (qs[32h + l] >> 2k) & 3, group 8h + 2k + l/16,
// x = d·sc·q − dmin·m. ggml: dequantize_row_q2_K.
struct qt_q2_K {
    static constexpr u32 QK = 256, QB = 84;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 h = c >> 4;
        const u32 k = (c >> 2) & 3;
        const u32 l0 = (c & 3) * 8;
        const u32 sc = ld_u8(w, b + 8 * h + 2 * k + l0 / 16);
        const float dl = ld_f16(w, b + 80) * u2f<0>(sc & 0xfu);
        const float ml = mul_rn(ld_f16(w, b + 82), u2f<0>(sc >> 4));
        const u32 o = b + 16 + 32 * h + l0;
        const u32 s = 2 * k;
        const u32 q0 = (ld_u32_4(w, o) >> s) & 0x03030303u;
        const u32 q1 = (ld_u32_4(w, o + 4) >> s) & 0x03030303u;
        return f4x2{mul_sub4(u8x4<0>(q0), dl, ml), mul_sub4(u8x4<0>(q1), dl, ml)};
    }
};

// q3_K, 110 bytes / 256: hmask[32] | qs[64] | scales[12] (16 × 6-bit, offset 32) | d f16.
// Element 128h + 32k + l: low = (qs[32h + l] >> 2k) & 3, minus 4 unless bit 4h + k of hmask[l]
// is set; group 8h + 2k + l/16. ggml: dequantize_row_q3_K.
struct qt_q3_K {
    static constexpr u32 QK = 256, QB = 110;
    // Group scale `is` (0..16) unpacked from the 12 bytes at s: 4 low bits from byte is % 8 (high
    // nibble for is >= 8), 2 high bits from byte 8 + is % 4; minus the offset 32.
    static __device__ __forceinline__ u32 scale_bits(const u8* __restrict__ w, u32 s, u32 is) {
        const u32 lo = (ld_u8(w, s + (is & 7)) >> (4 * (is >> 3))) & 0xfu;
        const u32 hi = (ld_u8(w, s + 8 + (is & 3)) >> (2 * (is >> 2))) & 3u;
        return lo | (hi << 4);
    }
    static __device__ __forceinline__ float scale(const u8* __restrict__ w, u32 s, u32 is) {
        return u2f<32>(scale_bits(w, s, is));
    }
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 h = c >> 4;
        const u32 k = (c >> 2) & 3;
        const u32 l0 = (c & 3) * 8;
        const float dl = ld_f16(w, b + 108) * scale(w, b + 96, 8 * h + 2 * k + l0 / 16);
        const u32 o = b + 32 + 32 * h + l0;
        const u32 s = 2 * k;
        const u32 m = 4 * h + k;
        // low | hbit << 2, minus 4 below: low − 4 + 4·hbit
        const u2 v = ld_u64_1(w, o), hm = ld_u64_1(w, b + l0);
        const u32 q0 = ((v.x >> s) & 0x03030303u) | (((hm.x >> m) & 0x01010101u) << 2);
        const u32 q1 = ((v.y >> s) & 0x03030303u) | (((hm.y >> m) & 0x01010101u) << 2);
        return f4x2{scale4(u8x4<4>(q0), dl), scale4(u8x4<4>(q1), dl)};
    }
};

// A q4_K / q5_K block's first 16 bytes (d, dmin and the 12 scale bytes) in one load: its
// blocks sit at multiples of 16 (144 and 176 bytes).
struct K4Head {
    f2 dm;          // d, dmin
    u32 s0, s1, s2; // scales[0..3], [4..7], [8..11]
    static __device__ __forceinline__ K4Head at(const u8* __restrict__ w, u32 b) {
        const u4 v = ld_u128_16(w, b);
        return K4Head{f2{f16_to_f32(v.x & 0xffffu), f16_to_f32(v.x >> 16)}, v.y, v.z, v.w};
    }
    // (scale, min) of group j (0..8), the 6-bit integers. ggml: get_scale_min_k4.
    __device__ __forceinline__ u2 scale_min_bits(u32 j) const {
        const u32 sh = 8 * (j & 3u);
        const u32 a = (s0 >> sh) & 0xffu, m = (s1 >> sh) & 0xffu, c = (s2 >> sh) & 0xffu;
        if (j < 4) {
            return u2{a & 63u, m & 63u};
        }
        return u2{(c & 0xfu) | ((a >> 6) << 4), (c >> 4) | ((m >> 6) << 4)};
    }
    // The same as floats.
    __device__ __forceinline__ f2 scale_min(u32 j) const {
        const u2 v = scale_min_bits(j);
        return f2{u2f<0>(v.x), u2f<0>(v.y)};
    }
};

// q4_K, 144 bytes / 256: d f16 | dmin f16 | scales[12] (8 × 6-bit scale and min) | qs[128].
// Element 64g + 32hi + l: nibble hi of qs[32g + l], group 2g + hi; x = d·sc·q − dmin·m.
// ggml: dequantize_row_q4_K.
struct qt_q4_K {
    static constexpr u32 QK = 256, QB = 144;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 g = c >> 3;
        const u32 hi = (c >> 2) & 1;
        const u32 l0 = (c & 3) * 8;
        const K4Head hd = K4Head::at(w, b);
        const f2 sm = hd.scale_min(2 * g + hi);
        const float d = hd.dm.x * sm.x;
        const float m = mul_rn(hd.dm.y, sm.y);
        const u2 q = ld_u64_8(w, b + 16 + 32 * g + l0);
        const u32 sh = 4 * hi;
        return f4x2{mul_sub4(u8x4<0>((q.x >> sh) & 0x0f0f0f0fu), d, m), mul_sub4(u8x4<0>((q.y >> sh) & 0x0f0f0f0fu), d, m)};
    }
};

// q5_K, 176 bytes / 256: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]. As q4_K with a fifth
// bit: element 64g + 32hi + l has bit 2g + hi of qh[l]. ggml: dequantize_row_q5_K.
struct qt_q5_K {
    static constexpr u32 QK = 256, QB = 176;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 g = c >> 3;
        const u32 hi = (c >> 2) & 1;
        const u32 l0 = (c & 3) * 8;
        const u32 j = 2 * g + hi;
        const K4Head hd = K4Head::at(w, b);
        const f2 sm = hd.scale_min(j);
        const float d = hd.dm.x * sm.x;
        const float m = mul_rn(hd.dm.y, sm.y);
        const u2 q = ld_u64_8(w, b + 48 + 32 * g + l0);
        const u2 qh = ld_u64_8(w, b + 16 + l0);
        const u32 sh = 4 * hi;
        const u32 q0 = ((q.x >> sh) & 0x0f0f0f0fu) | (((qh.x >> j) & 0x01010101u) << 4);
        const u32 q1 = ((q.y >> sh) & 0x0f0f0f0fu) | (((qh.y >> j) & 0x01010101u) << 4);
        return f4x2{mul_sub4(u8x4<0>(q0), d, m), mul_sub4(u8x4<0>(q1), d, m)};
    }
};

// q6_K, 210 bytes / 256: ql[128] | qh[64] | scales[16] i8 | d f16.
// Element 128h + 32k + l: q = nibble (k >> 1) of ql[64h + 32(k & 1) + l] | ((qh[32h + l] >> 2k)
// & 3) << 4, x = d·scales[8h + 2k + l/16]·(q − 32). ggml: dequantize_row_q6_K.
struct qt_q6_K {
    static constexpr u32 QK = 256, QB = 210;
    // Chunk c's 8 six-bit q (0 .. 63, one a byte) and its scale d · scales[8h + 2k + l0 / 16]:
    // dq8 here and i8w<qt_q6_K> (integers less 32) read them.
    static __device__ __forceinline__ u2 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 h = c >> 4, k = (c >> 2) & 3, l0 = (c & 3) * 8;
        const u32 ol = b + 64 * h + 32 * (k & 1) + l0, oh = b + 128 + 32 * h + l0;
        const u32 sl = 4 * (k >> 1), sh = 2 * k;
        const u2 l = ld_u64_1(w, ol), hb = ld_u64_1(w, oh);
        return u2{((l.x >> sl) & 0x0f0f0f0fu) | (((hb.x >> sh) & 0x03030303u) << 4),
                  ((l.y >> sl) & 0x0f0f0f0fu) | (((hb.y >> sh) & 0x03030303u) << 4)};
    }
    // Chunk c's sub-block scale, a signed byte.
    static __device__ __forceinline__ u32 scale_byte(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 h = c >> 4, k = (c >> 2) & 3, l0 = (c & 3) * 8;
        return ld_u8(w, b + 192 + 8 * h + 2 * k + l0 / 16);
    }
    static __device__ __forceinline__ float scale(const u8* __restrict__ w, u32 b, u32 c) {
        return ld_f16(w, b + 208) * i8f(scale_byte(w, b, c));
    }
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const u2 v = q(w, b, c);
        const float dl = scale(w, b, c);
        return f4x2{scale4(u8x4<32>(v.x), dl), scale4(u8x4<32>(v.y), dl)};
    }
};

// q8_K, 292 bytes / 256: d f32 | qs[256] i8 | bsums[16] i16. x = d·q (bsums are redundant).
// The CPU's dequant_q8_k.
struct qt_q8_K {
    static constexpr u32 QK = 256, QB = 292;
    static __device__ __forceinline__ f4x2 dq8(const u8* __restrict__ w, u32 b, u32 c) {
        const float d = __uint_as_float(ld_u32_4(w, b));
        const u32 o = b + 4 + c * 8;
        return f4x2{scale4(i8x4(ld_u32_4(w, o)), d), scale4(i8x4(ld_u32_4(w, o + 4)), d)};
    }
};

// ---- variant lists -----------------------------------------------------------------------------
// ---- integer weights for dp4a --------------------------------------------------------------------
// The quantized formats as the CPU's integer dot products see them (WGSL: each quant file's
// dq8i): i8w<Q>::q(w, b, c) gives chunk c of the block at byte b as 8 signed bytes in two words,
// a scale s and an offset m, element = s · q + m (m: a block's min, 0 without one). Float types
// have INT8 = false and take the f32 path.

struct QI8 {
    u2 q;
    float s, m;
};

// Whether the matvecs take the int8 path: __dp4a from sm_61 on (and in the emulation).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 610
#define MF_DP4A 1
#else
#define MF_DP4A 0
#endif

// Whether the prefill matmul can take the tensor cores' integer products (matmul_mma, matmul.cu):
// mma.sync m16n8k16 s8 from sm_80 on, and in the emulation (emu.h's mma_s8_m16n8k16).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define MF_MMA 1
#else
#define MF_MMA 0
#endif

// d += A · B for one warp: A 16 × 16 and B 16 × 8 signed bytes, d 16 × 8 s32, in PTX's fragment
// layout (g = lane / 4, t = lane % 4): a0 = A[g][4t .. 4t + 3], a1 = A[g + 8][4t .. 4t + 3],
// b0 = B[4t .. 4t + 3][g]; d = D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1].
static __device__ __forceinline__ void mma_s8(int (&d)[4], u32 a0, u32 a1, u32 b0) {
#if !defined(__CUDA_ARCH__)
    minfer_emu::mma_s8_m16n8k16(d, a0, a1, b0);
#elif __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0));
#else
    __trap();
#endif
}

// d = A · B + c for one warp, each of d's four sums starting from the same c: mma_s8 with the
// accumulator an input of its own (a register quad the IMMAs share) rather than tied to d. With
// c = I2F_BIAS the sums come out as i2f_biased reads them. mma_s8_k32_from: A 16 × 32 and B
// 32 × 8 (mma.sync m16n8k32); a[0], a[1] are mma_s8's a0, a1 over columns 0 .. 15 and a[2],
// a[3] the same rows over columns 16 .. 31; b0 = B[4t .. 4t + 3][g], b1 = B[4t + 16 .. 4t + 19][g].
// The emulation adds the two halves' products in turn: the same integers.
static __device__ __forceinline__ void mma_s8_from(int (&d)[4], u32 a0, u32 a1, u32 b0, int c) {
#if !defined(__CUDA_ARCH__)
    d[0] = d[1] = d[2] = d[3] = c;
    minfer_emu::mma_s8_m16n8k16(d, a0, a1, b0);
#elif __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(c));
#else
    __trap();
#endif
}

static __device__ __forceinline__ void mma_s8_k32_from(int (&d)[4], const u32 (&a)[4], u32 b0, u32 b1, int c) {
#if !defined(__CUDA_ARCH__)
    d[0] = d[1] = d[2] = d[3] = c;
    minfer_emu::mma_s8_m16n8k16(d, a[0], a[1], b0);
    minfer_emu::mma_s8_m16n8k16(d, a[2], a[3], b1);
#elif __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c));
#else
    __trap();
#endif
}

// d += A · B for one warp in f16 with f32 sums: A 16 × 16, B 16 × 8, d 16 × 8, in PTX's fragment
// layout (g = lane / 4, t = lane % 4; two halves a word, the lower element in the low half):
// a[0] = A[g][2t .. 2t + 1], a[1] = A[g + 8][2t ..], a[2] = A[g][2t + 8 ..], a[3] = A[g + 8][2t + 8 ..];
// b0 = B[2t .. 2t + 1][g], b1 = B[2t + 8 .. 2t + 9][g]; d as mma_s8's.
static __device__ __forceinline__ void mma_f16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if !defined(__CUDA_ARCH__)
    minfer_emu::mma_f16_m16n8k16(d, a, b0, b1);
#elif __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

// d += A · B for one warp to about f32's precision on the tensor cores' tf32 path: A (16 × K) and
// B (K × 8), K 4 or 8, each given split into tf32 parts (tf32_split: h + l), as three products
// whose sum leaves out only Al · Bl (mma.sync m16n8k4 / m16n8k8 .tf32: Al·Bh, Ah·Bl, Ah·Bh, the
// small ones first). Fragments (g = lane / 4, t = lane % 4; a float's bits a register): ah[0],
// al[0] = A[g][t], [1] = A[g + 8][t], with K 8 [2] = A[g][t + 4], [3] = A[g + 8][t + 4];
// bh[0], bl[0] = B[t][g], with K 8 [1] = B[t + 4][g]; d as mma_s8's.
template <u32 K>
static __device__ __forceinline__ void mma_tf32x3(float (&d)[4], const u32 (&ah)[K / 2], const u32 (&al)[K / 2],
                                                  const u32 (&bh)[K / 4], const u32 (&bl)[K / 4]) {
#if !defined(__CUDA_ARCH__)
    minfer_emu::mma_tf32x3_m16n8<K>(d, ah, al, bh, bl);
#elif __CUDA_ARCH__ >= 800
    const u32* as[3] = {al, ah, ah};
    const u32* bs[3] = {bh, bl, bh};
    MF_UNROLL
    for (u32 i = 0; i < 3; i++) {
        if constexpr (K == 4) {
            asm("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(as[i][0]), "r"(as[i][1]), "r"(bs[i][0]));
        } else {
            asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                "{%0, %1, %2, %3};"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(as[i][0]), "r"(as[i][1]), "r"(as[i][2]), "r"(as[i][3]), "r"(bs[i][0]), "r"(bs[i][1]));
        }
    }
#else
    __trap();
#endif
}

// v as two tf32 parts for mma_tf32x3: h, v rounded to tf32 (ten fraction bits, to nearest, ties
// away: cvt.rna), and l = v − h, exact in f32; the tensor cores read l to its upper 19 bits, so
// h + l carries v to within about 2^-22 of it.
static __device__ __forceinline__ f2 tf32_split(float v) {
#if !defined(__CUDA_ARCH__)
    u32 b = __float_as_uint(v);
    if ((b & 0x7f800000u) != 0x7f800000u) {
        b = (b + 0x1000u) & 0xffffe000u;
    }
    const float h = __uint_as_float(b);
#elif __CUDA_ARCH__ >= 800
    u32 b;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(b) : "f"(v));
    const float h = __uint_as_float(b);
#else
    const float h = v;
    __trap();
#endif
    return f2{h, v - h};
}

// r[j] = this lane's word of 8-row × 16-byte matrix j (ldmatrix .x1, .x2, .x4): matrix j's row i
// starts at the address lane 8j + i passes (16-byte aligned, shared memory); a lane receives word
// lane % 4 of row lane / 4. Over 8-bit elements, that is mma_s8's fragment of 8 rows (A) or 8
// columns (B) by 16 bytes of k: four reads in one instruction.
template <u32 N>
static __device__ __forceinline__ void ldsm(u32 (&r)[N], const u32* row) {
#if !defined(__CUDA_ARCH__)
    minfer_emu::ldmatrix(r, row);
#elif __CUDA_ARCH__ >= 750
    const u32 a = (u32)__cvta_generic_to_shared(row);
    if constexpr (N == 4) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    } else if constexpr (N == 2) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a));
    }
#else
    __trap();
#endif
}

// The bytes of n, each below 2h (h a power of two), less h, as signed bytes, without a borrow
// between bytes (q4_0: h 8, q5_0: 16, q6_K: 32): 0x80 + n − h stays within a byte, and flipping
// its top bit gives n − h. Three instructions a word, the first folded into whatever masked n.
template <u32 H>
static __device__ __forceinline__ u32 offset_i8(u32 n) {
    return ((n | 0x80808080u) - H * 0x01010101u) ^ 0x80808080u;
}

template <class Q>
struct i8w {
    static constexpr bool INT8 = false;
};

template <>
struct i8w<qt_q4_0> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 o = b + 2 + (c & 1) * 8, sh = (c >> 1) * 4;
        const u2 v = ld_u64_1(w, o);
        const u2 q{offset_i8<8>((v.x >> sh) & 0x0f0f0f0fu), offset_i8<8>((v.y >> sh) & 0x0f0f0f0fu)};
        return QI8{q, ld_f16(w, b), 0.0f};
    }
};

template <>
struct i8w<qt_q4_1> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 o = b + 4 + (c & 1) * 8, sh = (c >> 1) * 4;
        const u2 q{(ld_u32_4(w, o) >> sh) & 0x0f0f0f0fu, (ld_u32_4(w, o + 4) >> sh) & 0x0f0f0f0fu};
        const f2 dm = ld_f16x2(w, b);
        return QI8{q, dm.x, dm.y};
    }
};

template <>
struct i8w<qt_q5_0> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u2 h = q5_high(ld_u32_2(w, b + 2), c);
        const u32 o = b + 6 + (c & 1) * 8, sh = (c >> 1) * 4;
        const u2 v = ld_u64_1(w, o);
        const u2 q{offset_i8<16>(((v.x >> sh) & 0x0f0f0f0fu) | h.x), offset_i8<16>(((v.y >> sh) & 0x0f0f0f0fu) | h.y)};
        return QI8{q, ld_f16(w, b), 0.0f};
    }
};

template <>
struct i8w<qt_q5_1> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u2 h = q5_high(ld_u32_4(w, b + 4), c);
        const u2 v = ld_u64_8(w, b + 8 + (c & 1) * 8);
        const u32 sh = (c >> 1) * 4;
        const u2 q{((v.x >> sh) & 0x0f0f0f0fu) | h.x, ((v.y >> sh) & 0x0f0f0f0fu) | h.y};
        const f2 dm = ld_f16x2(w, b);
        return QI8{q, dm.x, dm.y};
    }
};

template <>
struct i8w<qt_q8_0> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 o = b + 2 + c * 8;
        return QI8{ld_u64_1(w, o), ld_f16(w, b), 0.0f};
    }
};

// The table bytes (LO: entries 0..7, HI: 8..15) of the 4 nibbles of n, as signed bytes.
template <unsigned long long LO, unsigned long long HI>
static __device__ __forceinline__ u32 table_i8(u32 n) {
    u32 r = 0;
    MF_UNROLL_N(4)
    for (u32 i = 0; i < 4; i++) {
        const u32 q = (n >> (8 * i)) & 0xfu;
        r |= (u32)((((q & 8u) ? HI : LO) >> (8 * (q & 7u))) & 0xffu) << (8 * i);
    }
    return r;
}

template <>
struct i8w<qt_iq4_nl> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        typedef qt_iq4_nl T;
        const u32 o = b + 2 + (c & 1) * 8, sh = (c >> 1) * 4;
        const u2 v = ld_u64_1(w, o);
        const u2 q{table_i8<T::LO, T::HI>(v.x >> sh), table_i8<T::LO, T::HI>(v.y >> sh)};
        return QI8{q, ld_f16(w, b), 0.0f};
    }
};

template <>
struct i8w<qt_mxfp4> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        typedef qt_mxfp4 T;
        const u32 o = b + 1 + (c & 1) * 8, sh = (c >> 1) * 4;
        const u2 v = ld_u64_1(w, o);
        const u2 q{table_i8<T::LO, T::HI>(v.x >> sh), table_i8<T::LO, T::HI>(v.y >> sh)};
        return QI8{q, e8m0_half(ld_u8(w, b)), 0.0f};
    }
};

template <>
struct i8w<qt_q2_K> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 h = c >> 4, k = (c >> 2) & 3, l0 = (c & 3) * 8;
        const u32 sc = ld_u8(w, b + 8 * h + 2 * k + l0 / 16);
        const u32 o = b + 16 + 32 * h + l0, s = 2 * k;
        const u2 q{(ld_u32_4(w, o) >> s) & 0x03030303u, (ld_u32_4(w, o + 4) >> s) & 0x03030303u};
        const f2 dm = ld_f16x2(w, b + 80);
        return QI8{q, dm.x * u2f<0>(sc & 0xfu), -mul_rn(dm.y, u2f<0>(sc >> 4))};
    }
};

template <>
struct i8w<qt_q3_K> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 h = c >> 4, k = (c >> 2) & 3, l0 = (c & 3) * 8;
        const u32 o = b + 32 + 32 * h + l0, s = 2 * k, m = 4 * h + k;
        // low − 4 where the mask bit is clear: 0xfc added to a byte below 4, no carry.
        const u2 hm = ld_u64_1(w, b + l0), v = ld_u64_1(w, o);
        const u32 h0 = ~(hm.x >> m) & 0x01010101u;
        const u32 h1 = ~(hm.y >> m) & 0x01010101u;
        const u2 q{((v.x >> s) & 0x03030303u) | (h0 * 0xfcu), ((v.y >> s) & 0x03030303u) | (h1 * 0xfcu)};
        return QI8{q, ld_f16(w, b + 108) * qt_q3_K::scale(w, b + 96, 8 * h + 2 * k + l0 / 16), 0.0f};
    }
};

template <>
struct i8w<qt_q4_K> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 g = c >> 3, hi = (c >> 2) & 1, l0 = (c & 3) * 8;
        const K4Head hd = K4Head::at(w, b);
        const f2 sm = hd.scale_min(2 * g + hi);
        const u2 v = ld_u64_8(w, b + 16 + 32 * g + l0);
        const u32 sh = 4 * hi;
        const u2 q{(v.x >> sh) & 0x0f0f0f0fu, (v.y >> sh) & 0x0f0f0f0fu};
        return QI8{q, hd.dm.x * sm.x, -mul_rn(hd.dm.y, sm.y)};
    }
};

template <>
struct i8w<qt_q5_K> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 g = c >> 3, hi = (c >> 2) & 1, l0 = (c & 3) * 8, j = 2 * g + hi;
        const K4Head hd = K4Head::at(w, b);
        const f2 sm = hd.scale_min(j);
        const u2 v = ld_u64_8(w, b + 48 + 32 * g + l0);
        const u2 qh = ld_u64_8(w, b + 16 + l0);
        const u32 sh = 4 * hi;
        const u2 q{((v.x >> sh) & 0x0f0f0f0fu) | (((qh.x >> j) & 0x01010101u) << 4),
                   ((v.y >> sh) & 0x0f0f0f0fu) | (((qh.y >> j) & 0x01010101u) << 4)};
        return QI8{q, hd.dm.x * sm.x, -mul_rn(hd.dm.y, sm.y)};
    }
};

template <>
struct i8w<qt_q6_K> {
    static constexpr bool INT8 = true;
    static __device__ __forceinline__ QI8 q(const u8* __restrict__ w, u32 b, u32 c) {
        const u2 v = qt_q6_K::q(w, b, c);
        return QI8{u2{offset_i8<32>(v.x), offset_i8<32>(v.y)}, qt_q6_K::scale(w, b, c), 0.0f};
    }
};

// i8k<Q>: the K-quants, whose sub-block scales are integers under one float d per 256-element
// block, as are the scales of their q8_K activations: KS{s, d} gives chunk c's integer scale s
// and its block's d (i8w<Q>'s scale is d · s). Within a 256-element block a tile can then sum
// s · Σ q_w q_x over sub-blocks in integers, as the CPU's dot products do, and scale once.
struct KS {
    int s;
    float d;
};
template <class Q>
struct i8k {
    static constexpr bool ON = false;
};
template <>
struct i8k<qt_q2_K> {
    static constexpr bool ON = true;
    static __device__ __forceinline__ KS at(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 h = c >> 4, k = (c >> 2) & 3, l0 = (c & 3) * 8;
        return KS{(int)(ld_u8(w, b + 8 * h + 2 * k + l0 / 16) & 0xfu), ld_f16(w, b + 80)};
    }
};
template <>
struct i8k<qt_q3_K> {
    static constexpr bool ON = true;
    static __device__ __forceinline__ KS at(const u8* __restrict__ w, u32 b, u32 c) {
        const u32 h = c >> 4, k = (c >> 2) & 3, l0 = (c & 3) * 8;
        return KS{(int)qt_q3_K::scale_bits(w, b + 96, 8 * h + 2 * k + l0 / 16) - 32, ld_f16(w, b + 108)};
    }
};
template <>
struct i8k<qt_q4_K> {
    static constexpr bool ON = true;
    static __device__ __forceinline__ KS at(const u8* __restrict__ w, u32 b, u32 c) {
        const K4Head hd = K4Head::at(w, b);
        return KS{(int)hd.scale_min_bits(2 * (c >> 3) + ((c >> 2) & 1)).x, hd.dm.x};
    }
};
template <>
struct i8k<qt_q5_K> {
    static constexpr bool ON = true;
    static __device__ __forceinline__ KS at(const u8* __restrict__ w, u32 b, u32 c) {
        return i8k<qt_q4_K>::at(w, b, c);
    }
};
template <>
struct i8k<qt_q6_K> {
    static constexpr bool ON = true;
    static __device__ __forceinline__ KS at(const u8* __restrict__ w, u32 b, u32 c) {
        return KS{(int)(signed char)qt_q6_K::scale_byte(w, b, c), ld_f16(w, b + 208)};
    }
};

// act_s<Q>: whether a matmul over weights Q meets q8_1 activations, whose per-block correction
// (quantize_act) the block's offset m multiplies: q4_1 and q5_1.
template <class Q>
struct act_s {
    static constexpr bool ON = false;
    static __device__ __forceinline__ float m(const u8* __restrict__, u32) { return 0.0f; }
};
template <>
struct act_s<qt_q4_1> {
    static constexpr bool ON = true;
    static __device__ __forceinline__ float m(const u8* __restrict__ w, u32 b) { return ld_f16(w, b + 2); }
};
template <>
struct act_s<qt_q5_1> {
    static constexpr bool ON = true;
    static __device__ __forceinline__ float m(const u8* __restrict__ w, u32 b) { return ld_f16(w, b + 2); }
};

// i8_halves<Q>: whether the two 16-element halves of a 32-element step have scales of their own
// (the 16-element sub-blocks of q2_K, q3_K and q6_K); elsewhere both halves share i8w's s and m.
template <class Q>
struct i8_halves {
    static constexpr bool ON = false;
};
template <>
struct i8_halves<qt_q2_K> {
    static constexpr bool ON = true;
};
template <>
struct i8_halves<qt_q3_K> {
    static constexpr bool ON = true;
};
template <>
struct i8_halves<qt_q6_K> {
    static constexpr bool ON = true;
};

// i8_min<Q>: whether i8w's offset m can be other than 0 (the formats with a min per block or
// sub-block).
template <class Q>
struct i8_min {
    static constexpr bool ON = false;
};
template <>
struct i8_min<qt_q4_1> {
    static constexpr bool ON = true;
};
template <>
struct i8_min<qt_q5_1> {
    static constexpr bool ON = true;
};
template <>
struct i8_min<qt_q2_K> {
    static constexpr bool ON = true;
};
template <>
struct i8_min<qt_q4_K> {
    static constexpr bool ON = true;
};
template <>
struct i8_min<qt_q5_K> {
    static constexpr bool ON = true;
};

// X(name) for each qtype a kernel reads: MF_MATRIX_QTYPES for the matrix ops (matmul_vec, matmul,
// get_rows), every weight qtype the GPU kernels read; MF_VECTOR_QTYPES for the vector ops
// (rms_norm, add_bias), the float ones. Entry points are <op>_<name>, the traits qt_<name>. Both
// lists are generated from the qtype table (src/backend/cuda/source.rs, `qtype_lists`) and
// prepended to every program, so a new table row needs only its traits here.
