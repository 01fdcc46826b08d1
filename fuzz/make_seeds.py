#!/usr/bin/env python3
"""Writes the seed corpus for the `gguf_header` fuzz target into seeds/gguf_header/.

Seeds (all small; the whole set stays well under 300 KB):
  minimal-v3.gguf          GGUF v3, no tensors, one key (general.architecture).
  llama-Q4_0-header.gguf   The header + tensor table of a real llama.cpp-converted file
                           (/work/shared/ref/random/gguf/llama-Q4_0.gguf), cut before the data:
                           realistic metadata (tokenizer arrays, merges), fails the data check.
  tiny-llama-q8_0.gguf     A complete 1-layer llama that Model::from_gguf accepts (Q8_0 + f32).
  tiny-qwen2-f16.gguf      A complete 2-layer qwen2 (Q/K/V biases, tied output), f16 + f32.
  tiny-gemma3-v2.gguf      A complete GGUF v2 gemma3 (QK norms, post norms, sliding window,
                           alignment 64, every metadata value type incl. nested arrays).

Run from the fuzz/ directory:  python3 make_seeds.py [path/to/llama-Q4_0.gguf]
"""
import os
import struct
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "gguf_header")
REAL = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/ref/random/gguf/llama-Q4_0.gguf"

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml tensor types: id, block elems, block bytes
GF32, GF16, GQ8_0 = (0, 1, 4), (1, 1, 2), (8, 32, 34)


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gval(ty, v):
    if ty == STRING:
        return gstr(v)
    if ty == ARRAY:
        ety, items = v
        return struct.pack("<IQ", ety, len(items)) + b"".join(gval(ety, x) for x in items)
    return struct.pack(SCALAR_FMT[ty], v)


def gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, shape, (id, elems, bytes))]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for k, ty, v in kvs:
        out += gstr(k) + struct.pack("<I", ty) + gval(ty, v)
    datas, off = [], 0
    for name, shape, (tid, be, bb) in tensors:
        n = 1
        for d in shape:
            n *= d
        assert shape[0] % be == 0
        nbytes = n // be * bb
        out += gstr(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", tid, off)
        # Deterministic, non-zero payload (f16/f32 scales stay finite: bytes < 0x78).
        datas.append((off, bytes((i * 7 + len(name)) % 0x70 for i in range(nbytes))))
        off = (off + nbytes + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    base = len(out)
    out += b"\0" * off
    for o, d in datas:
        out[base + o: base + o + len(d)] = d
    return bytes(out)


def model(arch, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_layer, mat, extra_kv=(),
          bias=False, qk_norm=False, post_norms=False, tied=False, **kw):
    kvs = [
        ("general.architecture", STRING, arch),
        ("general.name", STRING, f"tiny-{arch}"),
        (f"{arch}.block_count", U32, n_layer),
        (f"{arch}.context_length", U32, 64),
        (f"{arch}.embedding_length", U32, n_embd),
        (f"{arch}.feed_forward_length", U32, n_ff),
        (f"{arch}.attention.head_count", U32, n_head),
        (f"{arch}.attention.head_count_kv", U32, n_head_kv),
        (f"{arch}.attention.key_length", U32, head_dim),
        (f"{arch}.attention.value_length", U32, head_dim),
        (f"{arch}.rope.freq_base", F32, 10000.0),
        (f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-6),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, [f"t{i}" for i in range(n_vocab)])),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [1] * n_vocab)),
        ("tokenizer.ggml.merges", ARRAY, (STRING, ["t 0", "t 1"])),
        ("tokenizer.ggml.bos_token_id", U32, 0),
        ("tokenizer.ggml.eos_token_id", U32, 1),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
    ] + list(extra_kv)
    nq, nk = n_head * head_dim, n_head_kv * head_dim
    t = [("token_embd.weight", [n_embd, n_vocab], mat)]
    for il in range(n_layer):
        p = f"blk.{il}"
        t += [
            (f"{p}.attn_norm.weight", [n_embd], GF32),
            (f"{p}.attn_q.weight", [n_embd, nq], mat),
            (f"{p}.attn_k.weight", [n_embd, nk], mat),
            (f"{p}.attn_v.weight", [n_embd, nk], mat),
            (f"{p}.attn_output.weight", [nq, n_embd], mat),
            (f"{p}.ffn_norm.weight", [n_embd], GF32),
            (f"{p}.ffn_gate.weight", [n_embd, n_ff], mat),
            (f"{p}.ffn_up.weight", [n_embd, n_ff], mat),
            (f"{p}.ffn_down.weight", [n_ff, n_embd], mat),
        ]
        if bias:
            t += [(f"{p}.attn_q.bias", [nq], GF32), (f"{p}.attn_k.bias", [nk], GF32),
                  (f"{p}.attn_v.bias", [nk], GF32)]
        if qk_norm:
            t += [(f"{p}.attn_q_norm.weight", [head_dim], GF32),
                  (f"{p}.attn_k_norm.weight", [head_dim], GF32)]
        if post_norms:
            t += [(f"{p}.post_attention_norm.weight", [n_embd], GF32),
                  (f"{p}.post_ffw_norm.weight", [n_embd], GF32)]
    t.append(("output_norm.weight", [n_embd], GF32))
    if not tied:
        t.append(("output.weight", [n_embd, n_vocab], mat))
    return gguf(kvs, t, **kw)


def real_header(path):
    """The bytes of `path` up to the end of its tensor table."""
    b = open(path, "rb").read()
    pos = 24

    def s():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", b, pos)
        pos += 8 + n

    size = {U8: 1, I8: 1, U16: 2, I16: 2, U32: 4, I32: 4, F32: 4, BOOL: 1, U64: 8, I64: 8, F64: 8}

    def val(ty):
        nonlocal pos
        if ty == STRING:
            s()
        elif ty == ARRAY:
            ety, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            for _ in range(n):
                val(ety)
        else:
            pos += size[ty]

    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    for _ in range(n_kv):
        s()
        (ty,) = struct.unpack_from("<I", b, pos)
        pos += 4
        val(ty)
    for _ in range(n_t):
        s()
        (nd,) = struct.unpack_from("<I", b, pos)
        pos += 4 + 8 * nd + 4 + 8
    return b[:pos]


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "minimal-v3.gguf": gguf([("general.architecture", STRING, "llama")], []),
        "tiny-llama-q8_0.gguf": model("llama", 32, 4, 2, 8, 32, 8, 1, GQ8_0),
        "tiny-qwen2-f16.gguf": model("qwen2", 8, 2, 1, 4, 8, 6, 2, GF16, bias=True, tied=True),
        "tiny-gemma3-v2.gguf": model(
            "gemma3", 8, 2, 1, 4, 8, 6, 2, GF16, qk_norm=True, post_norms=True, tied=True,
            version=2, alignment=64,
            extra_kv=[
                ("general.alignment", U32, 64),
                ("gemma3.attention.sliding_window", U32, 16),
                ("gemma3.attention.sliding_window_pattern", U32, 2),
                ("gemma3.final_logit_softcapping", F32, 30.0),
                ("gemma3.rope.scaling.type", STRING, "linear"),
                ("gemma3.rope.scaling.factor", F32, 2.0),
                ("x.u8", U8, 1), ("x.i8", I8, -1), ("x.u16", U16, 2), ("x.i16", I16, -2),
                ("x.i32", I32, -3), ("x.u64", U64, 4), ("x.i64", I64, -4), ("x.f64", F64, 0.5),
                ("x.nested", ARRAY, (ARRAY, [(U8, [1, 2]), (BOOL, [True, False])])),
            ]),
    }
    if os.path.exists(REAL):
        seeds["llama-Q4_0-header.gguf"] = real_header(REAL)
    else:
        print(f"note: {REAL} not found, skipping the real-header seed", file=sys.stderr)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
