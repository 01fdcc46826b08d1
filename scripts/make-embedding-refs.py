#!/usr/bin/env python3
"""Record reference sentence embeddings of all-MiniLM-L6-v2 with sentence-transformers.

What it records (tests/data/embeddings/all-minilm-l6-v2.json):
  - the pipeline's settings: max_seq_length, pooling mode (from 1_Pooling/config.json),
    whether a Normalize module follows the pooling, the embedding dimension;
  - for each of 20 texts (short and long English, German, French, Spanish, Russian, Greek,
    Chinese, Japanese, Korean, Arabic, Hindi, emoji, code, numbers/dates, MIXED case,
    odd whitespace, a single word, accented Latin, URL/email):
      "ids"     token ids from the `tokenizers` library loading tokenizer.json, with the
                special tokens, truncated to max_seq_length and unpadded: exactly what the
                model sees (checked equal to SentenceTransformer.tokenize's input_ids);
      "tokens"  the matching wordpiece strings, for debugging;
      "embedding"              SentenceTransformer.encode(text) (all modules, so normalised
                               when the Normalize module is present), one text at a time;
      "embedding_unnormalized" the output of modules 0 (Transformer) and 1 (Pooling) only:
                               the mean-pooled vector before normalisation.
    Floats are float32 values written as their shortest round-trip decimal (numpy's str of
    the float32), i.e. full float32 precision; if the file would exceed 300 KB they are
    rounded to 8 significant digits instead ("float_format" says which).
  - "batch": the 20 texts encoded in one call (batch_size 32, so one padded batch) and
    compared with the one-at-a-time vectors; only the max abs differences are stored unless
    the normalised ones exceed 1e-6 (or the unnormalised ones 1e-6 relative to the vector's
    norm, their magnitude being ~1.5-6), in which case the batch vectors are stored too.

How to run (CPU only, fp32; needs the model from `scripts/fetch-models minilm`):
    python3 -m pip install --target /tmp/st-py torch sentence-transformers tokenizers
    PYTHONPATH=/tmp/st-py python3 scripts/make-embedding-refs.py [MODEL_DIR] [OUT_JSON]
Defaults: all-MiniLM-L6-v2 where scripts/fetch-models puts it ($MINFER_MODELS_DIR, else
~/.cache/minfer/models) and
tests/data/embeddings/all-minilm-l6-v2.json.

Versions used for the committed file (also written into it under "recorded_with"):
    sentence-transformers 6.3.0, transformers 5.25.0, tokenizers 0.23.3, torch 2.15.0+cu132
    (PyPI wheels, run on the CPU), Python 3.11.7, numpy 2.4.6.

Note: tokenizer.json itself carries truncation 128 and Fixed(128) padding; sentence-transformers
overrides both (truncates at max_seq_length = 256 from sentence_bert_config.json, pads only to
the longest text of a batch), and so does this script when it records "ids".
"""
import json
import os
import sys

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer
try:  # sentence-transformers >= 6
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling
except ImportError:
    from sentence_transformers.models import Normalize, Pooling

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where scripts/fetch-models puts models.
MODELS = os.environ.get("MINFER_MODELS_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "minfer", "models")
MODEL_DIR = sys.argv[1] if len(sys.argv) > 1 else os.path.join(MODELS, "all-MiniLM-L6-v2")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    ROOT, "tests", "data", "embeddings", "all-minilm-l6-v2.json")
MAX_BYTES = 300 * 1024

LONG_EN = (
    "The history of computing is a story of abstraction layered upon abstraction. Early "
    "machines were programmed by rewiring panels and flipping switches, and every "
    "calculation demanded intimate knowledge of the hardware. Assembly languages replaced "
    "raw numeric opcodes with mnemonics, and compilers later translated structured, "
    "human-readable programs into efficient machine code. Operating systems hid the "
    "details of disks, memory and interrupts behind files, processes and system calls, "
    "while networks connected isolated computers into a global fabric that nobody fully "
    "understands. Today, a developer can rent thousands of accelerators for an afternoon, "
    "train a neural network with billions of parameters, and serve it to millions of "
    "users without ever touching a screwdriver. Yet each layer leaks: caches thrash, "
    "floating-point sums drift with the order of accumulation, and a misplaced index can "
    "silently corrupt results. Good engineers therefore learn to peel the layers back when "
    "necessary, measuring rather than guessing, reading the generated kernels, and "
    "comparing their outputs against trusted references until the numbers agree to the "
    "last few bits that actually matter."
)

CASES = [
    ("short_en", "The quick brown fox jumps over the lazy dog."),
    ("long_en", LONG_EN),
    ("german", "Die Straße ist groß, und die Bäume blühen schön im Frühling; Grüße aus Köln!"),
    ("french", "L'été dernier, nous sommes allés à la forêt près du château où vécut un poète."),
    ("spanish", "¿Dónde está la estación de tren? ¡El niño comió una piña en mañana soleada!"),
    ("russian", "Съешь же ещё этих мягких французских булок, да выпей чаю."),
    ("greek", "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο."),
    ("chinese", "我爱自然语言处理，今天天气很好。"),
    ("japanese", "東京は日本の首都です。ひらがなとカタカナも使います。"),
    ("korean", "안녕하세요, 만나서 반갑습니다. 오늘 날씨가 좋네요."),
    ("arabic", "مرحبا بالعالم، كيف حالك اليوم؟"),
    ("hindi", "नमस्ते दुनिया, आप कैसे हैं?"),
    ("emoji", "I love pizza 🍕🍕 and cats 😺! 👍🏽 👨‍👩‍👧 ❤️"),
    ("code", 'fn main() { println!("hi"); }'),
    ("numbers", "3.14159, 2026-12-05, $1,234.56"),
    ("mixed_case", "MIXED Case TeXt With ALLCAPS and camelCaseIdentifiers"),
    ("whitespace", "  text with   extra   whitespace,\ttabs\tand\nnewlines\r\n\n  end  "),
    ("single_word", "hello"),
    ("accents", "Crème brûlée à la café naïve"),
    ("url_email", "Visit https://example.com/path?q=1&lang=en#top or mail jane.doe+test@example.org"),
]


def f32(xs, sig):
    """float32 values as Python floats whose repr is the shortest float32 round-trip
    string (sig None) or rounded to `sig` significant digits."""
    a = np.asarray(xs, dtype=np.float32)
    if sig is None:
        return [float(str(v)) for v in a]
    return [float(f"{float(v):.{sig}g}") for v in a]


def dump(doc):
    """JSON with one case per block and each vector on one line."""
    def j(v):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

    head = {k: v for k, v in doc.items() if k not in ("cases", "batch")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f" {j(k)}: {j(v)},")
    lines.append(' "cases": [')
    for i, c in enumerate(doc["cases"]):
        lines.append("  {")
        items = list(c.items())
        for n, (k, v) in enumerate(items):
            lines.append(f"   {j(k)}: {j(v)}" + ("," if n + 1 < len(items) else ""))
        lines.append("  }" + ("," if i + 1 < len(doc["cases"]) else ""))
    lines.append(" ],")
    lines.append(f' "batch": {j(doc["batch"])}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = SentenceTransformer(MODEL_DIR, device="cpu")
    model.eval()
    model.float()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    mods = list(model)
    pooling = mods[1]
    assert isinstance(pooling, Pooling), mods
    normalize = any(isinstance(m, Normalize) for m in mods[2:])
    pcfg = pooling.get_config_dict()
    if "pooling_mode" in pcfg:  # sentence-transformers >= 6: "mean", "cls", ... or a tuple
        modes = [pcfg["pooling_mode"]] if isinstance(pcfg["pooling_mode"], str) \
            else list(pcfg["pooling_mode"])
    else:  # older versions: pooling_mode_*_tokens booleans
        modes = [m for m in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens",
                             "weightedmean_tokens", "lasttoken")
                 if pcfg.get("pooling_mode_" + m)]
    names = {"mean_tokens": "mean", "cls_token": "cls", "max_tokens": "max",
             "weightedmean_tokens": "weightedmean"}
    pooling_mode = "+".join(names.get(m, m) for m in modes)
    assert pooling_mode, pcfg
    prep = getattr(model, "preprocess", None) or model.tokenize
    max_len = model.max_seq_length

    tok = tokenizers.Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    tok.no_padding()  # tokenizer.json ships with Fixed(128) padding and 128 truncation
    tok.enable_truncation(max_length=max_len)

    cases = []
    singles, singles_un = [], []
    with torch.no_grad():
        for name, text in CASES:
            enc = tok.encode(text)
            feats = prep([text])
            st_ids = feats["input_ids"][0].tolist()
            assert st_ids == enc.ids, (name, st_ids, enc.ids)
            untrunc = tokenizers.Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
            untrunc.no_padding()
            untrunc.no_truncation()
            n_full = len(untrunc.encode(text).ids)

            emb = model.encode(text, convert_to_numpy=True, batch_size=1)
            out = mods[1](mods[0](dict(feats)))
            un = out["sentence_embedding"][0].numpy()
            if normalize:
                # the Normalize module is F.normalize(p=2): check it is all that follows
                ref = un / max(np.linalg.norm(un.astype(np.float64)), 1e-12)
                assert np.max(np.abs(ref - emb)) < 1e-6, name
            singles.append(emb)
            singles_un.append(un)
            cases.append({
                "name": name,
                "text": text,
                "ids": enc.ids,
                "tokens": enc.tokens,
                "truncated": n_full > len(enc.ids),
                "embedding": emb,
                "embedding_unnormalized": un,
            })

        texts = [t for _, t in CASES]
        batch = model.encode(texts, convert_to_numpy=True, batch_size=32)
        feats = prep(texts)
        batch_un = mods[1](mods[0](dict(feats)))["sentence_embedding"].numpy()

    diff = float(np.max(np.abs(batch - np.stack(singles))))
    diff_un = float(np.max(np.abs(batch_un - np.stack(singles_un))))
    rel_un = float(np.max(np.abs(batch_un - np.stack(singles_un)).max(axis=1)
                          / np.linalg.norm(np.stack(singles_un), axis=1)))
    print(f"batch vs single: max abs diff {diff:.3g} (normalised), {diff_un:.3g} "
          f"(unnormalised; {rel_un:.3g} relative to the vector norm)")

    versions = {
        "sentence-transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
    }
    for sig, fmt in ((None, "float32 shortest round-trip"), (8, "8 significant digits")):
        doc = {
            "model": "all-MiniLM-L6-v2",
            "recorded_with": versions,
            "device": "cpu",
            "dtype": "float32",
            "max_seq_length": max_len,
            "dim": int(singles[0].shape[0]),
            "normalize": normalize,
            "pooling": pooling_mode,
            "float_format": fmt,
            "cases": [dict(c, embedding=f32(c["embedding"], sig),
                           embedding_unnormalized=f32(c["embedding_unnormalized"], sig))
                      for c in cases],
            "batch": {
                "batch_size": len(texts),
                "padded": True,
                "max_abs_diff_vs_single": diff,
                "max_abs_diff_vs_single_unnormalized": diff_un,
                "max_rel_diff_vs_single_unnormalized": rel_un,
            },
        }
        if diff > 1e-6 or rel_un > 1e-6:
            doc["batch"]["embeddings"] = [f32(v, sig) for v in batch]
            doc["batch"]["embeddings_unnormalized"] = [f32(v, sig) for v in batch_un]
        text = dump(doc)
        if len(text.encode()) <= MAX_BYTES:
            break
    json.loads(text)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUT} ({len(text.encode())} bytes, {fmt}, normalize={normalize}, "
          f"pooling={pooling_mode}, max_seq_length={max_len})")


if __name__ == "__main__":
    main()
