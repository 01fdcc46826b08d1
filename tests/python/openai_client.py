"""The official `openai` Python client against `minfer-wgpu serve`.

usage: openai_client.py BASE_URL API_KEY EXPECTED_JSON

EXPECTED_JSON holds what `minfer-wgpu run` answers greedily: {"question", "chat", "chat_tokens",
"prompt", "text", "text_tokens"}. Exits non-zero with the failed assertion's message.
"""

import json
import sys

import openai

base, key, expected = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)

models = client.models.list()
ids = [m.id for m in models.data]
assert len(ids) == 1, ids

messages = [{"role": "user", "content": expected["question"]}]
r = client.chat.completions.create(
    model=ids[0], messages=messages, temperature=0, max_tokens=expected["chat_tokens"]
)
assert r.object == "chat.completion", r
assert r.choices[0].message.role == "assistant", r
assert r.choices[0].message.content == expected["chat"], (r.choices[0].message.content, expected["chat"])
assert r.usage.completion_tokens == expected["chat_tokens"], r.usage

stream = client.chat.completions.create(
    model=ids[0],
    messages=messages,
    temperature=0,
    max_tokens=expected["chat_tokens"],
    stream=True,
    stream_options={"include_usage": True},
)
text, finish, usage, ids_seen = "", None, None, set()
for chunk in stream:
    ids_seen.add(chunk.id)
    if chunk.usage is not None:
        usage = chunk.usage
    for c in chunk.choices:
        text += c.delta.content or ""
        finish = c.finish_reason or finish
assert text == expected["chat"], (text, expected["chat"])
assert finish == "length", finish
assert usage is not None and usage.completion_tokens == expected["chat_tokens"], usage
assert len(ids_seen) == 1, ids_seen

c = client.completions.create(
    model=ids[0], prompt=expected["prompt"], temperature=0, max_tokens=expected["text_tokens"]
)
assert c.choices[0].text == expected["text"], (c.choices[0].text, expected["text"])

try:
    client.chat.completions.create(model=ids[0], messages=messages, max_tokens=0)
    raise AssertionError("max_tokens=0 was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400 and "max_tokens" in str(e), e

bad = openai.OpenAI(base_url=base, api_key="wrong", max_retries=0)
try:
    bad.models.list()
    raise AssertionError("a wrong key was accepted")
except openai.AuthenticationError as e:
    assert e.status_code == 401, e

print("ok", openai.__version__)
