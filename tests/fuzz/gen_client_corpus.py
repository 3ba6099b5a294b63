#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Seeds for tests/fuzz/fuzz_client.c: message sequences to requests "a", "b", "c",
each record [from_post (1 byte)][length (2 bytes LE)][msgpack body], packed the
way the daemons pack them (PROTOCOL.md). Run from anywhere; rewrites
tests/fuzz/corpus/client/. Needs Debian's python3-msgpack."""

import os
import struct

import msgpack

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "client")
TOK, POST = 0, 1


def rec(side, msg):
    body = msgpack.packb(msg, use_bin_type=True)
    return struct.pack("<BH", side, len(body)) + body


def ack(rid):
    return rec(TOK, {"v": 2, "type": "ack", "id": rid, "prompt_tokens": 1, "handle": 7,
                     "seed": 9})


def delta(rid, seq, text="x", tokens=(5,), logprobs=None):
    m = {"v": 2, "type": "delta", "id": rid, "seq": seq, "text": text, "tokens": list(tokens)}
    if logprobs is not None:
        m["logprobs"] = logprobs
    return rec(POST, m)


def final(rid, seq, reason="length", text=""):
    return rec(POST, {"v": 2, "type": "final", "id": rid, "seq": seq, "text": text,
                      "tokens": [], "finish_reason": reason,
                      "usage": {"prompt_tokens": 1, "completion_tokens": seq,
                                "cached_tokens": 0},
                      "timings": {"queue_us": 1, "ttft_us": 2, "total_us": 3}})


def error(side, rid, code, text="no"):
    return rec(side, {"v": 2, "type": "error", "id": rid, "code": code, "message": text})


WELCOME = rec(POST, {"v": 2, "type": "welcome", "server": "postprocd"})

SEEDS = {
    "happy": WELCOME + b"".join(ack(r) + delta(r, 0) + delta(r, 1) + final(r, 2)
                                for r in "abc"),
    "repeats_and_gap": WELCOME + ack("a") + delta("a", 0) + delta("a", 0) + delta("a", 2)
    + delta("a", 1) + delta("a", 2) + final("a", 3) + final("a", 3),
    "refused_and_lost": ack("a") + error(TOK, "b", "invalid_param", "field 'top_p'")
    + error(POST, "a", "not_found") + error(TOK, "", "bad_request"),
    "logprobs": ack("c") + delta("c", 0, "é", (3, 4), [[3, -0.5, [[3, -0.5], [8, -1.0]]],
                                                      [4, -1.5, []]]) + final("c", 1, "stop"),
    "output_before_ack": delta("b", 0) + final("b", 1, "abort") + ack("b"),
    "error_final": rec(POST, {"v": 2, "type": "final", "id": "a", "seq": 0, "text": "",
                              "tokens": [], "finish_reason": "error", "error": "internal",
                              "message": "boom",
                              "usage": {"prompt_tokens": 1, "completion_tokens": 0,
                                        "cached_tokens": 0},
                              "timings": {"queue_us": 0, "ttft_us": 0, "total_us": 0}}),
    "garbage": rec(POST, {"v": 2, "type": "delta"}) + b"\x01\x05\x00\xc1\xc1\xc1\xc1\xc1",
}

os.makedirs(OUT, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
