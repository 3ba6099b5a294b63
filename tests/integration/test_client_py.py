#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The Python client (client/python/ringserve_client.py) against the four real
daemons on stories260K: the published greedy text, streaming order, a refusal,
cancel, conversations (refused without a template; rendered by tokenizerd
--chat-template equal to the rendered prompt), and the same crash cases as the
C client's tests (tokenizerd killed before its ack, postprocd killed mid-stream): every delta exactly once, output
identical to a run without crashes. Each `test_<case>` is a ctest
`it.client_py.<case>`, run as `test_client_py.py <case>`; exit 0 pass, 1 fail,
77 skip (refdata absent).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("RS_SOURCE", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "client", "python"))
from ringserve_client import Client, Refused  # noqa: E402

BIN = os.environ.get("RS_BIN", os.path.join(SOURCE, "build", "bin"))
REFDATA = os.environ.get("RS_REFDATA", os.path.join(SOURCE, "..", "shared", "refdata"))
MODEL = os.path.join(REFDATA, "stories260K.gguf")
EXPECTED = os.path.join(REFDATA, "expected", "stories260K.greedy-n256.txt")
SKIP = 77


class Instance:
    """The four daemons as children of this process (they die with it: PR_SET_PDEATHSIG)."""

    STAGES = ("schedulerd", "launcherd", "tokenizerd", "postprocd")

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="rs-pyclient-")
        self.rundir = os.path.join(self.dir, "run")
        self.instance = f"py-{os.getpid()}"
        self.procs, self.starts = {}, {}
        self.extra = {}  # stage -> more arguments for its next start
        self.start("schedulerd")  # alone first: it creates the segment
        self.wait_file("schedulerd.door")
        for stage in self.STAGES[1:]:
            self.start(stage)
        self.ready()

    def start(self, stage):
        n = self.starts[stage] = self.starts.get(stage, -1) + 1
        argv = [os.path.join(BIN, stage), "--model", MODEL, "--instance", self.instance,
                "--rundir", self.rundir, "--ctx", "1024", "--max-requests", "64"]
        if stage == "launcherd":
            argv += ["--threads", "1"]
        argv += self.extra.get(stage, [])
        log = open(os.path.join(self.dir, f"{stage}-{n}.log"), "w")
        self.procs[stage] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait_file(self, name, limit=30.0):
        end = time.monotonic() + limit
        while not os.path.exists(os.path.join(self.rundir, name)):
            if time.monotonic() > end:
                self.dump()
                raise RuntimeError(f"{name} did not appear")
            time.sleep(0.005)

    def ready(self):
        """Every daemon serving: a one-token request goes all the way through."""
        for name in ("tokenizerd.sock", "postprocd.sock", "launcherd.door", "postprocd.door"):
            self.wait_file(name)
        with Client(rundir=self.rundir, timeout=30) as c:
            c.generate("", max_tokens=1, temperature=0)

    def kill(self, stage, sig=signal.SIGKILL):
        p = self.procs[stage]
        p.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            p.wait(10)

    def restart(self, stage):
        sock = {"tokenizerd": "tokenizerd.sock", "postprocd": "postprocd.sock"}.get(stage)
        self.start(stage)
        if sock:  # the restarted daemon binds its socket once it is serving
            end = time.monotonic() + 30
            while self.procs[stage].poll() is None and time.monotonic() < end:
                if _connectable(os.path.join(self.rundir, sock)):
                    return
                time.sleep(0.005)
            self.dump()
            raise RuntimeError(f"{stage} did not come back")

    def dump(self):
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name)) as f:
                    sys.stderr.write(f"---- {name} ----\n{f.read()}")

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run([os.path.join(BIN, "ringserve-shm"), "rm", f"ringserve-{self.instance}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", self.dir])


def _connectable(path):
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def collect(client, rid_events, prompt, **params):
    """Streams prompt, checking each event's seq as it arrives; returns (text, tokens, final)."""
    text, tokens, final = [], [], None
    for n, ev in enumerate(client.stream(prompt, **params)):
        check(ev.seq == n, f"event {n} has seq {ev.seq}")
        text.append(ev.text)
        tokens.extend(ev.tokens)
        final = ev
        rid_events.append(ev)
    return "".join(text), tokens, final


def test_greedy_bos_matches_published(inst):
    with open(EXPECTED, encoding="utf-8") as f:
        want = f.read()
    with Client(rundir=inst.rundir) as c:
        r = c.generate("", max_tokens=256, temperature=0)
    check(r["text"] == want, f"text differs:\n{r['text']}")
    check(r["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 256, r)


def test_stream_each_seq_once_matches_non_streamed(inst):
    with Client(rundir=inst.rundir) as c:
        whole = c.generate("Lily and Tom", max_tokens=80, temperature=0)
        text, tokens, final = collect(c, [], "Lily and Tom", max_tokens=80, temperature=0,
                                      logprobs=2)
        check(text == whole["text"] and tokens == whole["tokens"], "stream != non-streamed")
        check(final.final and final.usage["completion_tokens"] == len(tokens), final.usage)
        check(c.stats["duplicates"] == 0 and c.stats["gaps"] == 0, c.stats)


def test_refused_request_raises(inst):
    with Client(rundir=inst.rundir) as c:
        try:
            c.generate("x", top_p=1.5)
        except Refused as e:
            check(e.code == "invalid_param" and "top_p" in e.message, str(e))
            return
    raise AssertionError("top_p 1.5 was not refused")


def test_chat_without_template_refused(inst):
    """stories260K carries no chat template: a conversation is refused saying so."""
    with Client(rundir=inst.rundir) as c:
        try:
            c.generate(messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
        except Refused as e:
            check(e.code == "invalid_param" and "no chat template" in e.message, str(e))
            return
    raise AssertionError("a conversation without a template was not refused")


def test_chat_rendered_by_template_matches_the_rendered_prompt(inst):
    """tokenizerd restarted with --chat-template (Qwen2.5's, which writes no BOS): a
    conversation sent as messages= gives the tokens of the text ringserve-template renders."""
    tmpl = os.path.join(REFDATA, "chat-templates", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
    conv = os.path.join(REFDATA, "chat-templates", "conversations", "multi_turn.json")
    if not os.path.exists(tmpl) or not os.path.exists(conv):
        sys.exit(SKIP)
    inst.kill("tokenizerd", signal.SIGTERM)
    inst.extra["tokenizerd"] = ["--chat-template", tmpl]
    inst.restart("tokenizerd")
    import json
    with open(conv) as f:
        messages = json.load(f)["messages"]
    text = subprocess.run([os.path.join(BIN, "ringserve-template"), "--template", tmpl,
                           "--messages", conv, "--add-generation-prompt"], check=True,
                          capture_output=True).stdout.decode()
    with Client(rundir=inst.rundir) as c:
        chat = c.generate(messages=messages, max_tokens=12, temperature=0)
        ref = c.generate(text, max_tokens=12, temperature=0)
    check(chat["usage"]["prompt_tokens"] == ref["usage"]["prompt_tokens"],
          (chat["usage"], ref["usage"]))
    check(chat["tokens"] == ref["tokens"] and len(chat["tokens"]) == 12, (chat, ref))


def test_structured_output_shorthands(inst):
    schema = {"type": "object", "properties": {"a": {"enum": ["x", "y"]},
              "n": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["a", "n"], "additionalProperties": False}
    with Client(rundir=inst.rundir) as c:
        r = c.generate("Once upon a time", max_tokens=60, temperature=0, json_schema=schema)
        v = json.loads(r["text"])
        check(v["a"] in ("x", "y") and 1 <= v["n"] <= 9 and len(v) == 2, r["text"])
        r = c.generate("Once", max_tokens=20, temperature=0.7, seed=4, choice=["up", "down"])
        check(r["text"] in ("up", "down") and r["finish_reason"] == "stop", r)
        r = c.generate("Once", max_tokens=20, temperature=0, regex="[0-9]{3}")
        check(len(r["text"]) == 3 and r["text"].isdigit(), r["text"])
        r = c.generate("Once", max_tokens=4, temperature=0, logit_bias={300: 100})
        check(r["tokens"] == [300] * 4, r["tokens"])
        r = c.generate("Once", max_tokens=6, temperature=1.0, seed=2, allowed_token_ids=[5, 6])
        check(set(r["tokens"]) <= {5, 6}, r["tokens"])
        try:
            c.generate("x", max_tokens=4, grammar="root ::= (")
        except Refused as e:
            check(e.code == "invalid_param" and "line 1" in e.message, str(e))
            return
    raise AssertionError("a malformed grammar was not refused")


def test_cancel_mid_stream_aborts(inst):
    with Client(rundir=inst.rundir) as c:
        n, final = 0, None
        for ev in c.stream("Once upon a time", max_tokens=1000, temperature=0, ignore_eos=True):
            n += len(ev.tokens)
            if n == 10 and not ev.final:
                c.cancel(ev.id)
            final = ev
        check(final.final and final.finish_reason == "abort", final.finish_reason)
        check(10 <= n < 1000 and final.usage["completion_tokens"] == n, (n, final.usage))


def test_tokenizerd_killed_before_ack_runs_once(inst):
    params = dict(max_tokens=64, temperature=0)
    with Client(rundir=inst.rundir) as c:
        ref = c.generate("The dog", **params)
        inst.kill("tokenizerd", signal.SIGSTOP)  # it cannot read the generate ...
        events = []
        c.submit("The dog", callback=events.append, stream=True, **params)
        end = time.monotonic() + 5
        while c.stats["gen_sent"] < 2 and time.monotonic() < end:  # ref was the first
            c.poll(0.005)
        inst.kill("tokenizerd")  # ... and the message dies with it
        inst.restart("tokenizerd")
        check(c.wait(60), "no final after tokenizerd came back")
        check([e.seq for e in events] == list(range(len(events))), "seqs not 0..n-1 once")
        check("".join(e.text for e in events) == ref["text"], "output differs")
        check(c.stats["gen_resent"] >= 1, c.stats)


def test_postprocd_killed_mid_stream_each_delta_once(inst):
    params = dict(max_tokens=500, temperature=0, ignore_eos=True)
    with Client(rundir=inst.rundir) as c:
        ref = c.generate("One day", **params)
        events = []
        c.submit("One day", callback=events.append, stream=True, **params)
        while len(events) < 20:
            c.poll(0.01)
        inst.kill("postprocd")
        end = time.monotonic() + 0.03
        while time.monotonic() < end:
            c.poll(0.005)
        inst.restart("postprocd")
        check(c.wait(60), "no final after postprocd came back")
        check([e.seq for e in events] == list(range(len(events))), "seqs not 0..n-1 once")
        check(sum(e.final for e in events) == 1, "finals")
        tokens = [t for e in events for t in e.tokens]
        check(tokens == ref["tokens"] and "".join(e.text for e in events) == ref["text"],
              "output differs from the run without a crash")
        print(f"postprocd killed: {c.stats}", file=sys.stderr)


def main():
    cases = {k[5:]: v for k, v in globals().items() if k.startswith("test_")}
    if len(sys.argv) != 2 or sys.argv[1] not in cases:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(cases)}")
    if not os.path.exists(MODEL) or not os.path.exists(EXPECTED):
        print(f"refdata {MODEL} not found: skipping", file=sys.stderr)
        sys.exit(SKIP)
    inst = Instance()
    try:
        cases[sys.argv[1]](inst)
    except Exception:
        inst.dump()
        raise
    finally:
        inst.stop()
    print(f"{sys.argv[1]}: ok", file=sys.stderr)


if __name__ == "__main__":
    main()
