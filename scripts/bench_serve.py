#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers: aggregate generated tokens/s and time to first
token at several client counts. Standard library only.

usage: bench_serve.py BASE_URL [--clients 1,4,8] [--requests-per-client 4] [--max-tokens 64]
                      [--prompt-words 96] [--json]

Each client sends its requests one after another, streaming, greedy, `ignore_eos` so that every
request generates exactly --max-tokens tokens; prompts differ per request (no prefix cache hits
between requests). Aggregate tokens/s = all generated tokens / wall time of the whole level.
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse

WORDS = ("river stone lantern orchard copper meadow signal harbor violet engine pocket thunder "
         "garden ladder marble feather canyon button silver window planet tunnel ribbon candle").split()


def prompt(i, n_words):
    # A different prompt per request, same length: a rotating walk over the word list.
    words = [WORDS[(i * 7 + k * (i % 5 + 1)) % len(WORDS)] for k in range(n_words)]
    return f"Request {i}. Continue this list of words with more words: " + " ".join(words)


def one(base, i, args):
    u = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({
        "model": "m",
        "messages": [{"role": "user", "content": prompt(i, args.prompt_words)}],
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    })
    t0 = time.perf_counter()
    conn.request("POST", u.path.rstrip("/") + "/chat/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    ttft, tokens, chunks = None, None, 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        v = json.loads(data)
        if v.get("usage"):
            tokens = v["usage"]["completion_tokens"]
        for c in v.get("choices", []):
            if c.get("delta", {}).get("content"):
                chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    conn.close()
    return ttft or 0.0, tokens if tokens is not None else chunks


def level(base, clients, args, offset):
    results, errors = [], []
    lock = threading.Lock()

    def client(c):
        for k in range(args.requests_per_client):
            try:
                r = one(base, offset + c * args.requests_per_client + k, args)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 - reported, and the level fails
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed: {errors[0]}")
    tokens = sum(n for _, n in results)
    return {
        "clients": clients,
        "requests": len(results),
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "tok_s": round(tokens / wall, 2),
        "ttft_median_ms": round(1000 * statistics.median(t for t, _ in results), 1),
        "ttft_max_ms": round(1000 * max(t for t, _ in results), 1),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=96)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    one(args.base, 10**6, args)  # warm-up
    offset = 0
    for n in (int(x) for x in args.clients.split(",")):
        row = level(args.base, n, args, offset)
        offset += 1000
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"clients {n:2}: {row['tok_s']:8.2f} tok/s  ttft median {row['ttft_median_ms']:8.1f} ms"
                  f"  max {row['ttft_max_ms']:8.1f} ms  ({row['requests']} requests, {row['wall_s']} s)", flush=True)


if __name__ == "__main__":
    main()
