#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes the wire-protocol fuzz corpora (tests/fuzz/corpus/wire_{client,server,door}/).

Messages are packed with Python's msgpack, as a Python client would pack them
(float64 floats, smallest ints), plus hand-made byte strings for what no
library emits (truncation, bad bytes, huge count claims). The file name says
what the C decoders must do: "ok-..." decodes (and, for client requests,
validates); "bad-<code>-..." fails with that rs_wire_code name. test_wire's
corpus_* cases hold the decoders to it, so the corpus is a test fixture as
well as the fuzzers' seed. Run from anywhere; rewrites the three directories.
"""
import os
import shutil
import struct

import msgpack

V = 2  # RS_WIRE_VERSION
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def pk(obj):
    return msgpack.packb(obj, use_bin_type=True)


def gen(**kw):
    m = {"v": V, "type": "generate", "id": "req-1", "prompt": "Hello"}
    m.update(kw)
    return {k: v for k, v in m.items() if v is not None}


def client_cases():
    full = gen(max_tokens=64, temperature=0.7, top_p=0.9, top_k=40, min_p=0.05,
               repetition_penalty=1.1, presence_penalty=0.5, frequency_penalty=-0.5,
               seed=2**64 - 1, stop=["\n\n", "User:"], stop_token_ids=[2, 32000],
               ignore_eos=True, logprobs=5, stream=True, priority=-3)
    c = {
        "ok-generate-minimal": pk(gen()),
        "ok-generate-full": pk(full),
        "ok-generate-empty-prompt": pk(gen(prompt="")),
        "ok-generate-prompt-ids": pk(gen(prompt=None, prompt_ids=[1, 15043, 3186, 2**31 - 1])),
        "ok-generate-int-for-float": pk(gen(temperature=1, top_p=1, repetition_penalty=2)),
        "ok-generate-greedy": pk(gen(temperature=0.0)),
        "ok-generate-utf8": pk(gen(prompt="héllo wörld – 日本語 🦙", stop=["🦙"])),
        "ok-cancel": pk({"v": V, "type": "cancel", "id": "req-1"}),
        "ok-hello": pk({"v": V, "type": "hello"}),
        "ok-hello-secret": pk({"v": V, "type": "hello", "secret": "0123456789abcdef" * 4}),
        "bad-invalid_param-hello-secret-short": pk({"v": V, "type": "hello", "secret": "short"}),
        "bad-invalid_param-hello-secret-space": pk({"v": V, "type": "hello",
                                                    "secret": "has a space in it!"}),
        "bad-wrong_type-hello-secret-int": pk({"v": V, "type": "hello", "secret": 7}),
        "ok-resume": pk({"v": V, "type": "resume", "id": "req-1", "from_seq": 17}),
        "ok-release": pk({"v": V, "type": "release", "id": "req-1"}),
        "bad-missing_field-release-id": pk({"v": V, "type": "release"}),
        "ok-generate-constraint-gbnf": pk(gen(constraint={"kind": "gbnf",
                                                          "text": 'root ::= "a" | "b"'})),
        "ok-generate-constraint-choice": pk(gen(constraint={"kind": "choice",
                                                            "choices": ["yes", "no"]},
                                                logit_bias={5: -100, 7: 2.5},
                                                allowed_token_ids=[5, 6, 7])),
        "ok-generate-constraint-json-object": pk(gen(constraint={"kind": "json_object"})),
        "bad-invalid_param-constraint-kind": pk(gen(constraint={"kind": "yaml", "text": "x"})),
        "bad-invalid_param-constraint-no-text": pk(gen(constraint={"kind": "regex"})),
        "bad-missing_field-constraint-kind": pk(gen(constraint={"text": "x"})),
        "bad-unknown_field-constraint-foo": pk(gen(constraint={"kind": "json_object", "foo": 1})),
        "bad-wrong_type-logit_bias-string-key": pk(gen(logit_bias={"5": 1.0})),
        "bad-too_large-logit_bias": pk(gen(logit_bias={i: 1.0 for i in range(1025)})),
        "bad-invalid_param-logit_bias-150": pk(gen(logit_bias={5: 150.0})),
        "bad-unknown_field-release-from_seq": pk({"v": V, "type": "release", "id": "a",
                                                  "from_seq": 1}),
        "bad-unknown_field-foo": pk(gen(foo=1)),
        "bad-unknown_field-hello-id": pk({"v": V, "type": "hello", "id": "x"}),
        "bad-wrong_type-top_p-string": pk(gen(top_p="0.9")),
        "bad-wrong_type-stream-int": pk(gen(stream=1)),
        "bad-wrong_type-max_tokens-float": pk(gen(max_tokens=16.0)),
        "bad-wrong_type-stop-not-array": pk(gen(stop="\n")),
        "bad-wrong_type-prompt-bin": pk(gen(prompt=b"Hello")),
        "bad-missing_field-id": pk({"v": V, "type": "generate", "prompt": "x"}),
        "bad-missing_field-v": pk({"type": "generate", "id": "a", "prompt": "x"}),
        "bad-missing_field-prompt": pk(gen(prompt=None)),
        "bad-missing_field-resume-from_seq": pk({"v": V, "type": "resume", "id": "a"}),
        "bad-unsupported_version-v-next": pk(gen(v=V + 1, newfield=True)),
        "bad-unsupported_version-v0": pk(gen(v=0)),
        "bad-bad_request-unknown-type": pk({"v": V, "type": "launch", "id": "a"}),
        "bad-bad_request-server-type": pk({"v": V, "type": "ack", "id": "a"}),
        "bad-bad_request-not-a-map": pk(["generate", "a"]),
        "bad-too_large-stop-17": pk(gen(stop=["s%d" % i for i in range(17)])),
        "bad-too_large-stop-string": pk(gen(stop=["x" * 257])),
        "bad-too_large-id": pk(gen(id="i" * 65)),
        "bad-too_large-stop_token_ids": pk(gen(stop_token_ids=list(range(65)))),
        "bad-invalid_param-temperature-negative": pk(gen(temperature=-0.5)),
        "bad-invalid_param-top_p-zero": pk(gen(top_p=0.0)),
        "bad-invalid_param-top_k-negative": pk(gen(top_k=-1)),
        "bad-invalid_param-min_p": pk(gen(min_p=1.5)),
        "bad-invalid_param-repetition_penalty": pk(gen(repetition_penalty=0)),
        "bad-invalid_param-presence_penalty": pk(gen(presence_penalty=2.5)),
        "bad-invalid_param-logprobs-21": pk(gen(logprobs=21)),
        "bad-invalid_param-max_tokens-0": pk(gen(max_tokens=0)),
        "bad-invalid_param-max_tokens-2p32": pk(gen(max_tokens=2**32)),
        "bad-invalid_param-both-prompts": pk(gen(prompt_ids=[1, 2])),
        "bad-invalid_param-empty-prompt_ids": pk(gen(prompt=None, prompt_ids=[])),
        "bad-invalid_param-token-2p31": pk(gen(prompt=None, prompt_ids=[2**31])),
        "bad-invalid_param-empty-stop": pk(gen(stop=[""])),
        "bad-invalid_param-id-space": pk(gen(id="a b")),
        "bad-invalid_param-priority-2p31": pk(gen(priority=2**31)),
        "bad-invalid_param-nan-temperature": pk(gen(temperature=float("nan"))),
    }
    c.update(chat_cases())
    # Duplicate key: msgpack refuses to pack one, so splice the bytes by hand.
    dup = bytearray(pk(gen()))
    dup[0] += 1
    c["bad-bad_request-duplicate-key"] = bytes(dup) + pk("prompt") + pk("again")
    bad_utf8 = bytearray(pk(gen(prompt=None)))
    bad_utf8[0] += 1
    c["bad-bad_request-bad-utf8"] = bytes(bad_utf8) + pk("prompt") + b"\xa2\xc3\x28"
    body = pk(gen())
    c["bad-bad_request-truncated"] = body[:-3]
    c["bad-bad_request-trailing"] = body + b"\xc0"
    c["bad-bad_request-c1-byte"] = b"\x81\xa2id\xc1"
    c["bad-bad_request-empty"] = b""
    # A map32 claiming 2**32-1 pairs in a few bytes: rejected by the count check, not looped.
    c["bad-bad_request-huge-map-claim"] = b"\xdf\xff\xff\xff\xff" + pk("v") + pk(V)
    c["bad-bad_request-huge-str-claim"] = b"\x82\xa1v\x02\xa4type\xdb\xff\xff\xff\xf0abc"
    # Deep nesting under an unknown key: skipped iteratively and cut at depth 32 (the
    # header pass lets any value nest as deep as a conversation document may).
    deep = nest(40)
    c["bad-too_large-deep-nesting"] = pk(gen(extra=deep))
    # The same values in other integer widths than a packer would choose.
    wide = bytearray(b"\x85")
    for k, v in (("v", b"\xcf" + struct.pack(">Q", V)), ("type", pk("generate")),
                 ("id", pk("w")), ("prompt", pk("")),
                 ("max_tokens", b"\xd3" + struct.pack(">q", 7))):
        wide += pk(k) + v
    c["ok-generate-wide-ints"] = bytes(wide)
    f32 = bytearray(b"\x85")
    for k, v in (("v", pk(V)), ("type", pk("generate")), ("id", pk("f")), ("prompt", pk("")),
                 ("top_p", b"\xca" + struct.pack(">f", 0.5))):
        f32 += pk(k) + v
    c["ok-generate-float32"] = bytes(f32)
    return c

TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CONV = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


def chat(**kw):
    return gen(**dict({"prompt": None, "messages": CONV}, **kw))


def nest(n):
    v = "x"
    for _ in range(n):
        v = [v]
    return v


def chat_cases():
    """Conversations (messages, tools, add_generation_prompt, chat_template_kwargs)."""
    tool_turns = CONV + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    c = {
        "ok-generate-messages": pk(chat()),
        "ok-generate-messages-tools": pk(gen(prompt=None, messages=tool_turns, tools=[TOOL],
                                             add_generation_prompt=True,
                                             chat_template_kwargs={"enable_thinking": False})),
        "ok-generate-messages-parts": pk(chat(messages=[{"role": "user", "content": [
            {"type": "text", "text": "Hi"}, {"type": "text", "text": " there"}]}])),
        "ok-generate-messages-no-gen-prompt": pk(chat(add_generation_prompt=False,
                                                      temperature=0, max_tokens=8)),
        "ok-generate-messages-deep-32": pk(chat(chat_template_kwargs={"x": nest(30)})),
        "bad-invalid_param-messages-empty": pk(chat(messages=[])),
        "bad-invalid_param-messages-and-prompt": pk(chat(prompt="x")),
        "bad-invalid_param-tools-without-messages": pk(gen(tools=[TOOL])),
        "bad-invalid_param-add_generation_prompt-without-messages":
            pk(gen(add_generation_prompt=True)),
        "bad-invalid_param-chat_template_kwargs-without-messages":
            pk(gen(chat_template_kwargs={"a": 1})),
        "bad-invalid_param-messages-nan": pk(chat(messages=[{"role": "user",
                                                             "content": float("nan")}])),
        "bad-invalid_param-messages-u64": pk(chat(chat_template_kwargs={"n": 2**64 - 1})),
        "bad-wrong_type-messages-map": pk(chat(messages={"role": "user", "content": "x"})),
        "bad-wrong_type-messages-item-string": pk(chat(messages=["hi"])),
        "bad-wrong_type-messages-bin": pk(chat(messages=[{"role": "user", "content": b"x"}])),
        "bad-wrong_type-messages-int-key": pk(chat(messages=[{"role": "user", 1: "x"}])),
        "bad-wrong_type-tools-item-string": pk(chat(tools=["get_weather"])),
        "bad-wrong_type-add_generation_prompt-int": pk(chat(add_generation_prompt=1)),
        "bad-wrong_type-chat_template_kwargs-array": pk(chat(chat_template_kwargs=[1])),
        "bad-too_large-messages-1025": pk(chat(messages=CONV[1:] * 1025)),
        "bad-too_large-tools-257": pk(chat(tools=[TOOL] * 257)),
        "bad-too_large-messages-deep-33": pk(chat(chat_template_kwargs={"x": nest(32)})),
        "bad-too_large-messages-key": pk(chat(messages=[{"role": "user", "k" * 257: 1}])),
        "bad-too_large-messages-nodes": pk(chat(messages=[{"role": "user",
                                                           "content": [[1]] * 16500}])),
    }
    # Invalid UTF-8 inside a message's content: spliced, since msgpack packs only valid str.
    good = pk(chat(messages=[{"role": "user", "content": "ab"}]))
    c["bad-bad_request-messages-bad-utf8"] = good.replace(b"\xa2ab", b"\xa2\xc3\x28")
    # A message map claiming 2**32-1 pairs in a few bytes: the count check, not a loop.
    c["bad-bad_request-messages-huge-claim"] = pk(chat()).replace(
        pk(CONV), b"\x91\xdf\xff\xff\xff\xff")
    return c


def server_cases():
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "cached_tokens": 0}
    timings = {"queue_us": 120, "ttft_us": 15000, "total_us": 48000}
    lp = [[15043, -0.25, [[15043, -0.25], [3186, -1.75]]], [3186, -0.5, []]]
    fin = {"v": V, "type": "final", "id": "req-1", "seq": 2, "text": "", "tokens": [],
           "finish_reason": "stop", "usage": usage, "timings": timings}
    delta = {"v": V, "type": "delta", "id": "req-1", "seq": 0, "text": "Hello world",
             "tokens": [15043, 3186]}

    def with_(m, **kw):
        n = dict(m)
        n.update(kw)
        return {k: v for k, v in n.items() if v is not None}

    c = {
        "ok-ack": pk({"v": V, "type": "ack", "id": "req-1", "prompt_tokens": 6,
                      "handle": 2**40 + 3, "seed": 42}),
        "ok-error": pk({"v": V, "type": "error", "id": "req-1", "code": "overloaded",
                        "message": "queue full"}),
        "ok-error-no-id": pk({"v": V, "type": "error", "id": "", "code": "bad_request",
                              "message": "message must be a msgpack map, got array"}),
        "ok-welcome": pk({"v": V, "type": "welcome", "server": "postprocd"}),
        "ok-delta": pk(delta),
        "ok-delta-logprobs": pk(with_(delta, logprobs=lp)),
        "ok-final": pk(fin),
        "ok-final-length-text": pk(with_(fin, finish_reason="length", text="!", tokens=[29991])),
        "ok-final-error": pk(with_(fin, finish_reason="error", error="internal",
                                   message="launcherd restarted too often")),
        "bad-missing_field-final-usage": pk(with_(fin, usage=None)),
        "bad-missing_field-usage-cached": pk(with_(fin, usage={"prompt_tokens": 1,
                                                               "completion_tokens": 1})),
        "bad-unknown_field-timings": pk(with_(fin, timings=dict(timings, gpu_us=1))),
        "bad-invalid_param-finish": pk(with_(fin, finish_reason="eos")),
        "bad-invalid_param-code": pk({"v": V, "type": "error", "id": "", "code": "teapot",
                                      "message": ""}),
        "bad-bad_request-error-without-finish-error": pk(with_(fin, error="internal")),
        "bad-bad_request-finish-error-without-code": pk(with_(fin, finish_reason="error")),
        "bad-bad_request-logprobs-count": pk(with_(delta, logprobs=lp[:1])),
        "bad-bad_request-logprobs-token": pk(with_(delta, logprobs=[lp[1], lp[0]])),
        "bad-too_large-top-21": pk(with_(delta, tokens=[1], logprobs=[[1, -1.0, [[2, -2.0]] * 21]])),
        "bad-wrong_type-seq": pk(with_(delta, seq="0")),
        "bad-bad_request-client-type": pk({"v": V, "type": "generate", "id": "a", "prompt": ""}),
        "bad-bad_request-truncated": pk(fin)[:-1],
    }
    return c


def door(kind, *fields):
    return pk([V, kind, 123456789] + list(fields))


def door_cases():
    return {
        "ok-request_ready": door(1, 7, 3),
        "ok-cancel": door(2, 7, 3, 1),
        "ok-batch_ready": door(3, 2**40, 5),
        "ok-batch_done": door(4, 2**40, 5),
        "ok-tokens_ready": door(5, 9, [[7, 3, 12], [8, 1, 1], [4095, 2**33, 4096]]),
        "ok-tokens_ready-empty": door(5, 9, []),
        "ok-wake": door(6),
        "ok-wake-unstamped": pk([V, 6, 0]),
        "bad-bad_request-unknown-kind": door(99),
        "bad-bad_request-kind-zero": door(0),
        "bad-bad_request-count": door(1, 7),
        "bad-bad_request-extra": door(6, 1),
        "bad-bad_request-map": pk({"v": V, "kind": 6}),
        "bad-bad_request-truncated": door(3, 2**40, 5)[:-2],
        "bad-unsupported_version-v-next": pk([V + 1, 6, 0]),
        "bad-invalid_param-cancel-reason-0": door(2, 7, 3, 0),
        "bad-invalid_param-cancel-reason-9": door(2, 7, 3, 9),
        "bad-invalid_param-slot-2p32": door(1, 2**32, 3),
        "bad-invalid_param-negative": door(1, -1, 3),
        "bad-wrong_type-gen": door(1, 7, "3"),
        "bad-too_large-entries": door(5, 9, [[1, 1, 1]] * 1025),
        "bad-bad_request-entry-pair": door(5, 9, [[1, 1]]),
    }


def write(name, cases):
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for fname, data in sorted(cases.items()):
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("wire_client", client_cases())
    write("wire_server", server_cases())
    write("wire_door", door_cases())
