"""The official `openai` and `ollama` Python clients' embedding calls against `minfer-wgpu serve`
with an embedding model.

usage: embeddings_client.py BASE_URL EXPECTED_JSON

EXPECTED_JSON: {"model": id, "texts": [..], "vectors": [[..], ..]} with sentence-transformers'
vectors of the texts. Exits non-zero with the failed assertion's message.
"""

import json
import math
import sys

import ollama
import openai

base, expected = sys.argv[1], json.loads(sys.argv[2])
model, texts, refs = expected["model"], expected["texts"], expected["vectors"]


def cos(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def close(vec, ref, what):
    assert len(vec) == len(ref), (what, len(vec), len(ref))
    c = cos(vec, ref)
    assert c >= 0.9999, (what, c)


client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=300)

# One string.
r = client.embeddings.create(model=model, input=texts[0])
assert len(r.data) == 1 and r.data[0].index == 0, r
close(r.data[0].embedding, refs[0], "string")
assert r.usage.prompt_tokens > 0, r.usage

# A list.
r = client.embeddings.create(model=model, input=texts)
assert [d.index for d in r.data] == list(range(len(texts))), r
for d, ref in zip(r.data, refs):
    close(d.embedding, ref, "list")

# base64: the client decodes it back to floats (its default when numpy is absent is float).
r = client.embeddings.create(model=model, input=texts[1], encoding_format="base64")
emb = r.data[0].embedding
if isinstance(emb, str):
    import base64
    import struct

    raw = base64.b64decode(emb)
    emb = list(struct.unpack("<%df" % (len(raw) // 4), raw))
close(emb, refs[1], "base64")

# Typed errors: a too long input is a 400 naming the limit.
try:
    client.embeddings.create(model=model, input="word " * 700)
    raise AssertionError("a 702-token input was accepted")
except openai.BadRequestError as e:
    assert "512" in str(e), e

# Ollama's client.
o = ollama.Client(host=base)
r = o.embed(model=model, input=texts)
assert len(r.embeddings) == len(texts), r
for v, ref in zip(r.embeddings, refs):
    close(v, ref, "ollama embed")
r = o.embed(model=model, input=texts[0])
close(r.embeddings[0], refs[0], "ollama embed string")
print("ok")
