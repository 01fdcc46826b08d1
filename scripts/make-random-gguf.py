#!/usr/bin/env python3
"""Write a Llama-shaped GGUF with random quantized weights, for speed runs on a device where
no real 7B model can be carried. numpy only; no gguf package needed.

usage: make-random-gguf.py OUT.gguf q4_0|q4_k_m [--shape llama2-7b|llama3-8b] [--layers N]
                           [--vocab N] [--sparse]

llama2-7b: 4,096 wide, 11,008 FFN, 32 heads and 32 KV heads, 32,000 tokens (the default);
llama3-8b: 4,096 wide, 14,336 FFN, 32 heads over 8 KV heads, 128,256 tokens. q4_k_m follows
llama.cpp's Q4_K_M rule (attn_v and some ffn_down in q6_K, output q6_K). The vocabulary is a
fake SentencePiece one (<unk>, <s>, </s>, the 256 byte tokens, then "▁tN" pieces) so
llama.cpp and minfer both load it. Blocks hold random quants and small finite scales (seed 7:
the same bytes every time): outputs are garbage, the bytes moved and the kernels run are a
real model's. --sparse writes the header and leaves the data a hole of zeros (a file of the
shape that takes no disk, for `minfer-wgpu plan`).
"""
import struct
import sys
import time

import numpy as np

ALIGN = 32
T_F32, T_Q4_0, T_Q4_K, T_Q6_K = 0, 2, 12, 14
BLOCK = {T_Q4_0: (32, 18), T_Q4_K: (256, 144), T_Q6_K: (256, 210)}


def kv_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return kv_str(key) + struct.pack("<I", vtype) + payload


def u32(key, v):
    return kv(key, 4, struct.pack("<I", v))


def f32(key, v):
    return kv(key, 6, struct.pack("<f", v))


def string(key, v):
    return kv(key, 8, kv_str(v))


def arr(key, etype, items, fmt=None):
    body = struct.pack("<IQ", etype, len(items))
    if etype == 8:
        body += b"".join(kv_str(s) for s in items)
    else:
        body += np.asarray(items, dtype=fmt).tobytes()
    return kv(key, 9, body)


def chunk_for(qtype, rng, nbytes):
    """A random buffer of whole blocks with finite, small scales."""
    qk, bs = BLOCK[qtype]
    nb = max(1, nbytes // bs)
    raw = rng.integers(0, 256, size=(nb, bs), dtype=np.uint8)
    def f16(lo, hi):
        return rng.uniform(lo, hi, size=nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
    if qtype == T_Q4_0:
        raw[:, 0:2] = f16(0.002, 0.006)
    elif qtype == T_Q4_K:
        raw[:, 0:2] = f16(0.0001, 0.0004)
        raw[:, 2:4] = f16(0.00005, 0.0002)
    elif qtype == T_Q6_K:
        raw[:, 192:208] = rng.integers(-20, 20, size=(nb, 16)).astype(np.int8).view(np.uint8)
        raw[:, 208:210] = f16(0.0001, 0.0004)
    return raw.tobytes()


def main():
    out, mix = sys.argv[1], sys.argv[2]
    n_layer = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 32
    shape = sys.argv[sys.argv.index("--shape") + 1] if "--shape" in sys.argv else "llama2-7b"
    shapes = {
        # (n_embd, n_ff, n_head, n_head_kv, n_vocab, rope base)
        "llama2-7b": (4096, 11008, 32, 32, 32000, 10000.0),
        "llama3-8b": (4096, 14336, 32, 8, 128256, 500000.0),
    }
    if shape not in shapes:
        sys.exit(f"--shape {shape}: one of {', '.join(shapes)}")
    n_embd, n_ff, n_head, n_head_kv, n_vocab, rope_base = shapes[shape]
    if "--vocab" in sys.argv:
        n_vocab = int(sys.argv[sys.argv.index("--vocab") + 1])
    sparse = "--sparse" in sys.argv
    if mix not in ("q4_0", "q4_k_m"):
        sys.exit(f"{mix}: q4_0 or q4_k_m")
    base = T_Q4_0 if mix == "q4_0" else T_Q4_K

    def more_bits(i):
        return i < n_layer // 8 or i >= 7 * n_layer // 8 or (i - n_layer // 8) % 3 == 2

    tensors = []  # (name, ne, type)
    tensors.append(("token_embd.weight", (n_embd, n_vocab), base))
    for i in range(n_layer):
        p = f"blk.{i}."
        heavy = T_Q6_K if (mix == "q4_k_m" and more_bits(i)) else base
        tensors += [
            (p + "attn_norm.weight", (n_embd,), T_F32),
            (p + "attn_q.weight", (n_embd, n_embd), base),
            (p + "attn_k.weight", (n_embd, n_embd * n_head_kv // n_head), base),
            (p + "attn_v.weight", (n_embd, n_embd * n_head_kv // n_head), heavy),
            (p + "attn_output.weight", (n_embd, n_embd), base),
            (p + "ffn_norm.weight", (n_embd,), T_F32),
            (p + "ffn_gate.weight", (n_embd, n_ff), base),
            (p + "ffn_up.weight", (n_embd, n_ff), base),
            (p + "ffn_down.weight", (n_ff, n_embd), heavy),
        ]
    tensors.append(("output_norm.weight", (n_embd,), T_F32))
    tensors.append(("output.weight", (n_embd, n_vocab), T_Q6_K if mix == "q4_k_m" else base))

    def nbytes(ne, t):
        n = int(np.prod(ne))
        if t == T_F32:
            return 4 * n
        qk, bs = BLOCK[t]
        assert ne[0] % qk == 0, (ne, t)
        return n // qk * bs

    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    toks += [f"\u2581t{i}" for i in range(n_vocab - len(toks))]
    ttype = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(n_vocab - 259)]
    kvs = [
        string("general.architecture", "llama"),
        string("general.name", f"random-{shape}-{mix}"),
        u32("general.alignment", ALIGN),
        u32("general.file_type", 2 if mix == "q4_0" else 15),
        u32("llama.context_length", 16384),
        u32("llama.embedding_length", n_embd),
        u32("llama.block_count", n_layer),
        u32("llama.feed_forward_length", n_ff),
        u32("llama.rope.dimension_count", n_embd // n_head),
        u32("llama.attention.head_count", n_head),
        u32("llama.attention.head_count_kv", n_head_kv),
        f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
        f32("llama.rope.freq_base", rope_base),
        u32("llama.vocab_size", n_vocab),
        string("tokenizer.ggml.model", "llama"),
        arr("tokenizer.ggml.tokens", 8, toks),
        arr("tokenizer.ggml.scores", 6, scores, "<f4"),
        arr("tokenizer.ggml.token_type", 5, ttype, "<i4"),
        u32("tokenizer.ggml.bos_token_id", 1),
        u32("tokenizer.ggml.eos_token_id", 2),
        u32("tokenizer.ggml.unknown_token_id", 0),
    ]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    off = 0
    infos = b""
    layout = []
    for name, ne, t in tensors:
        infos += kv_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", t, off)
        n = nbytes(ne, t)
        layout.append((t, n))
        off += (n + ALIGN - 1) // ALIGN * ALIGN
    head += infos
    head += b"\0" * ((-len(head)) % ALIGN)

    if sparse:
        with open(out, "wb") as f:
            f.write(head)
            f.truncate(len(head) + off)
        print(f"{out}: {len(tensors)} tensors, {off / 1e9:.2f} GB of weights (sparse)")
        return
    rng = np.random.default_rng(7)
    chunks = {t: chunk_for(t, rng, 8 << 20) for t in (T_Q4_0, T_Q4_K, T_Q6_K)}
    ones = np.ones(n_embd, dtype=np.float32).tobytes()
    t0 = time.time()
    with open(out, "wb") as f:
        f.write(head)
        for t, n in layout:
            if t == T_F32:
                f.write(ones[:n])
            else:
                c = chunks[t]
                left = n
                while left > 0:
                    w = min(left, len(c))
                    f.write(c[:w])
                    left -= w
            f.write(b"\0" * ((-n) % ALIGN))
    print(f"{out}: {len(tensors)} tensors, {off / 1e9:.2f} GB of weights, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
