// Byte-offset readers over a raw GGUF weight `w: array<u32>` (declared by the op). GGUF blocks
// are not 4-byte aligned (q4_0 is 18 bytes, q8_0 34, q6_K 210), so a 32-bit word at any byte
// offset is two neighbours combined; 16-bit fields always sit at even offsets. Buffers carry
// 4 bytes of padding so the neighbour of the last word exists.

fn w_u32(b: u32) -> u32 {
    let i = b >> 2u;
    let s = (b & 3u) * 8u;
    let lo = w[i];
    if (s == 0u) {
        return lo;
    }
    return (lo >> s) | (w[i + 1u] << (32u - s));
}

fn w_u16(b: u32) -> u32 {
    return (w[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu;
}

fn w_u8(b: u32) -> u32 {
    return (w[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

fn w_i8(b: u32) -> i32 {
    return bitcast<i32>(w_u8(b) << 24u) >> 24u;
}

fn w_f16(b: u32) -> f32 {
    return f16_to_f32(w_u16(b));
}

// Nibbles (shift 0 or 4) of the 4 bytes at b, as floats.
fn w_nib4(b: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(unpack4xU8((w_u32(b) >> shift) & 0x0f0f0f0fu));
}

// (scale, min) of group j from the 12 packed 6-bit scale/min bytes at s (q4_K, q5_K).
// ggml: get_scale_min_k4.
fn scale_min_k4(s: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(w_u8(s + j) & 63u), f32(w_u8(s + j + 4u) & 63u));
    }
    let b4 = w_u8(s + j + 4u);
    let sc = (b4 & 0xfu) | ((w_u8(s + j - 4u) >> 6u) << 4u);
    let mn = (b4 >> 4u) | ((w_u8(s + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
}

// Chunk c of a quantized block as the int8 matvec reads it (`dq8i`, matmul_vec_row_i8.wgsl):
// its 8 weights as signed bytes, 4 a word, with element = s · q + m.
struct QI8 {
    q: vec2<u32>,
    s: f32,
    m: f32,
}

// The bytes of n, each below 2h (h a power of two), less h, as signed bytes: the offset
// q4_0 (h 8), q5_0 (16) and q6_K (32) take off, without a borrow between bytes.
fn offset_i8(n: u32, h: u32) -> u32 {
    let hv = h * 0x01010101u;
    let t = n ^ hv;
    return t | ((t & hv) * (256u / h - 2u));
}

// Bits 0..3 of x, one to each byte's bit 0.
fn bits_to_bytes(x: u32) -> u32 {
    return ((x & 0xfu) * 0x00204081u) & 0x01010101u;
}
