#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration tests for ops/: ops/serve under real supervisord with the four real
daemons, the crash-loop listener (ops/rs_crashloop.py) and tools/ringserve-stat.

Each case starts its own instance (unique name, state directory in /tmp) on a
tiny random model made with ringserve-mkmodel, drives it with real signals and
real ZeroMQ clients (PROTOCOL.md messages via python3-zmq and python3-msgpack),
and always tears everything down, even on failure. ctest registers every
`def test_<case>()` below as `it.ops.<case>` (tests/CMakeLists.txt) and runs
`test_ops.py <case>`. Exit 0 pass, 1 fail. No timing thresholds: waits are
deadlines for something to happen, never assertions about speed.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid


def _python_with_zmq():
    """Re-executes under Debian's python3 when this interpreter lacks python3-zmq/msgpack."""
    try:
        import msgpack  # noqa: F401
        import zmq  # noqa: F401
        return
    except ImportError:
        pass
    for cand in ("/usr/bin/python3",):
        if os.path.realpath(cand) != os.path.realpath(sys.executable) and os.access(cand, os.X_OK):
            os.execv(cand, [cand] + sys.argv)
    sys.exit("test_ops: python3-zmq and python3-msgpack are needed (ops/setup --deps-only)")


_python_with_zmq()
import msgpack  # noqa: E402
import zmq  # noqa: E402

SRC = os.environ.get("RS_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BIN = os.environ.get("RS_BIN") or os.path.join(SRC, "build", "bin")
STAGES = ("tokenizerd", "schedulerd", "launcherd", "postprocd")
DEADLINE = float(os.environ.get("RS_OPS_DEADLINE", "90"))  # seconds for anything to happen


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def wait_for(what, fn, timeout=DEADLINE, step=0.05):
    """Polls fn() until it returns a true value; returns it or fails naming `what`."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise Failure(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


def pid_running(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def lock_dir():
    """ops/serve's per-user lock directory."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    return f"{xdg if xdg.startswith('/') else '/tmp'}/ringserve-locks-{os.getuid()}"


class Instance:
    """One ops/serve run: its model, state directory, instance name, and its teardown."""

    TINY = ("--dim", "64", "--layers", "2", "--heads", "4", "--ffn", "128")
    # Slow enough per token (about 10x TINY) that a long request outlives a crash loop.
    SMALL = ("--dim", "512", "--layers", "8", "--heads", "8", "--ffn", "1376", "--type", "f16")

    def __init__(self, case, shape=TINY):
        self.name = f"ops-{case[:24]}-{os.getpid()}"
        self.dir = tempfile.mkdtemp(prefix="rs-ops-")
        self.state = os.path.join(self.dir, "state")
        self.rundir = os.path.join(self.dir, "run")
        self.model = os.path.join(self.dir, "tiny.gguf")
        self.proc = None
        self.out_path = os.path.join(self.dir, "serve.out")
        subprocess.run([os.path.join(BIN, "ringserve-mkmodel"), "-o", self.model, *shape,
                        "--vocab", "512", "--ctx", "4096", "--seed", "7"], check=True,
                       capture_output=True)

    def start(self, *extra):
        cmd = [os.path.join(SRC, "ops", "serve"), "--model", self.model, "--instance", self.name,
               "--bin", BIN, "--state-dir", self.state, "--rundir", self.rundir, "--threads",
               "1", "--no-http", *extra]  # gatewayd under ops/serve: test_gateway_serve.py
        out = open(self.out_path, "ab")
        # Own process group (setsid), like a terminal job: stop() sends what Ctrl-C sends.
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()

    def stat(self, *args):
        return subprocess.run([os.path.join(BIN, "ringserve-stat"), "--instance", self.name,
                               *args], capture_output=True, text=True)

    def stat_json(self):
        r = self.stat("--json")
        check(r.returncode == 0, f"ringserve-stat --json failed: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def wait_ready(self, timeout=DEADLINE):
        r = self.stat("--wait-ready", str(int(timeout)))
        check(r.returncode == 0, f"instance not ready: {r.stderr.strip()}")
        return self.stat_json()

    def supervisord_pid(self):
        with open(os.path.join(self.state, "supervisord.pid")) as f:
            return int(f.read())

    def segment_exists(self):
        return os.path.exists(f"/dev/shm/ringserve-{self.name}")

    def processes(self):
        """Live processes whose command line names this instance (stages, listener,
        supervisord via its config path)."""
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            if (self.name in cmd or self.state in cmd) and pid_running(int(d)):
                found.append((int(d), cmd.strip()))
        return found

    def stop(self, sig=signal.SIGINT):
        """Sends sig to ops/serve's process group (what Ctrl-C does) and waits for it."""
        os.killpg(self.proc.pid, sig)
        return self.proc.wait(timeout=DEADLINE)

    def log(self, name):
        try:
            with open(os.path.join(self.state, "log", name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def dump(self):
        sys.stderr.write(f"--- ops/serve output ({self.out_path}) ---\n")
        try:
            with open(self.out_path, errors="replace") as f:
                sys.stderr.write(f.read()[-6000:])
        except OSError:
            pass
        for n in ("crashloop.log",) + tuple(f"{s}.log" for s in STAGES):
            sys.stderr.write(f"--- {n} (tail) ---\n{self.log(n)[-2500:]}\n")

    def teardown(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=DEADLINE)
        for pid, _ in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run([os.path.join(BIN, "ringserve-shm"), "rm", f"/ringserve-{self.name}"],
                       capture_output=True)
        try:
            os.unlink(os.path.join(lock_dir(), f"{self.name}.lock"))  # left by a SIGKILL
        except FileNotFoundError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


class Client:
    """A PROTOCOL.md client: one routing id, a DEALER to tokenizerd and one to postprocd."""

    def __init__(self, rundir):
        self.ctx = zmq.Context()
        self.rid = b"ops-" + uuid.uuid4().hex.encode()
        self.rundir = rundir
        self.tok = self.dealer("tokenizerd.sock")
        self.out = None
        self.connect_out()

    def dealer(self, ep):
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.ROUTING_ID, self.rid)
        s.setsockopt(zmq.LINGER, 0)
        # ZMTP heartbeats as the client libraries set them: a connection the ROUTER no
        # longer routes to (its id handed to another socket) times out and reconnects.
        s.setsockopt(zmq.HEARTBEAT_IVL, 1000)
        s.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3000)
        s.setsockopt(zmq.HEARTBEAT_TTL, 3000)
        s.connect(f"ipc://{self.rundir}/{ep}")
        return s

    def connect_out(self):
        """(Re)connects to postprocd under the same routing id and says hello."""
        if self.out is not None:
            self.out.close(linger=0)
        self.out = self.dealer("postprocd.sock")
        self.hello()

    def disconnect_out(self):
        """Leaves postprocd: its messages for us wait in shared memory (PROTOCOL.md)."""
        self.out.close(linger=0)
        self.out = None

    def send(self, sock, msg):
        sock.send_multipart([b"", msgpack.packb(msg)])

    def recv(self, sock, timeout):
        if sock.poll(int(timeout * 1000)) == 0:
            return None
        return msgpack.unpackb(sock.recv_multipart()[-1])

    def hello(self):
        self.send(self.out, {"v": 2, "type": "hello"})
        m = self.recv(self.out, DEADLINE)
        check(m is not None and m.get("type") == "welcome", f"no welcome from postprocd: {m}")

    def generate(self, rid, **fields):
        self.send(self.tok, {"v": 2, "type": "generate", "id": rid, **fields})
        m = self.recv(self.tok, DEADLINE)
        check(m is not None and m.get("type") == "ack", f"generate {rid}: expected ack, got {m}")
        return m

    def resume(self, rid, from_seq=0):
        self.send(self.out, {"v": 2, "type": "resume", "id": rid, "from_seq": from_seq})

    def final(self, rid, timeout=DEADLINE):
        """Messages of request rid until its final (errors for it are returned too)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = self.recv(self.out, 0.2)
            if m is not None and m.get("id") == rid and m.get("type") in ("final", "error"):
                return m
        raise Failure(f"no final or error for {rid} within {timeout:g} s")

    def close(self):
        self.ctx.destroy(linger=0)


GREEDY = {"temperature": 0, "ignore_eos": True}


def with_instance(fn, shape=Instance.TINY):
    """Runs a case with a fresh Instance, dumping its logs on failure and always tearing
    it down."""
    def run():
        inst = Instance(fn.__name__.removeprefix("test_"), shape)
        try:
            fn(inst)
        except BaseException:
            inst.dump()
            raise
        finally:
            inst.teardown()
    run.__name__ = fn.__name__
    return run


def check_gone(inst, pids, what):
    wait_for(f"{what}: processes {pids} to end", lambda: not any(pid_running(p) for p in pids))
    wait_for(f"{what}: no process naming the instance",
             lambda: not inst.processes(), timeout=10)


def check_four_ready(doc):
    check(len(doc["stages"]) == 4, f"expected 4 stages, got {len(doc['stages'])}")
    for s in doc["stages"]:
        check(s["ready"] and s["alive"] and s["phase"] == "READY" and s["pid"] > 0,
              f"stage not ready: {s}")
    check(doc["ready"], "instance not ready")
    check([s["name"] for s in doc["stages"]] == list(STAGES), "stage order")


@with_instance
def test_serve_start_stop_clean(inst):
    """ops/serve brings up four ready stages; Ctrl-C (SIGINT to its process group) stops
    every process and removes the segment and every socket file."""
    inst.start()
    doc = inst.wait_ready()
    check_four_ready(doc)
    pids = [s["pid"] for s in doc["stages"]] + [inst.supervisord_pid()]
    check(all(pid_running(p) for p in pids), "stage or supervisord pid not running")
    check(sorted(os.listdir(inst.rundir)) ==
          sorted(["tokenizerd.sock", "postprocd.sock", "schedulerd.door", "launcherd.door",
                  "postprocd.door"]), f"rundir holds {os.listdir(inst.rundir)}")
    # A second ops/serve on the same instance must refuse, leaving the live one alone.
    again = subprocess.run([os.path.join(SRC, "ops", "serve"), "--model", inst.model,
                            "--instance", inst.name, "--bin", BIN, "--state-dir",
                            os.path.join(inst.dir, "state2")], capture_output=True, text=True,
                           timeout=DEADLINE)
    check(again.returncode == 1 and "another ops/serve runs instance" in again.stderr,
          f"second ops/serve: {again.returncode} {again.stderr.strip()}")
    check(all(pid_running(p) for p in pids), "the second ops/serve disturbed the first")
    for bad in ([], ["--model", inst.model, "--bogus"], ["--model", "/nonexistent.gguf"]):
        r = subprocess.run([os.path.join(SRC, "ops", "serve"), *bad], capture_output=True,
                           text=True, timeout=DEADLINE)
        check(r.returncode == 2 and r.stderr.startswith("ops/serve: "),
              f"ops/serve {bad}: {r.returncode} {r.stderr.strip()}")
    rc = inst.stop(signal.SIGINT)
    check(rc == 0, f"ops/serve exited {rc} after Ctrl-C")
    check_gone(inst, pids, "after Ctrl-C")
    check(not inst.segment_exists(), "segment left after Ctrl-C")
    check(not os.path.exists(inst.rundir), f"rundir left: {inst.rundir}")
    r = inst.stat("--once")
    check(r.returncode == 1 and "not running" in r.stderr, f"stat after stop: {r.stderr}")


@with_instance
def test_stat_json_and_latency_table(inst):
    """ringserve-stat --json is one JSON object with four ready stages, the request table,
    KV usage and every histogram; requests served show up in its counters and in the
    --latency-table rows; --once renders; a missing instance is a clear exit 1."""
    r = inst.stat("--once")
    check(r.returncode == 1 and "is not running" in r.stderr, f"before start: {r.stderr}")
    inst.start()
    check_four_ready(inst.wait_ready())
    cl = Client(inst.rundir)
    try:
        for i in range(3):
            cl.generate(f"s{i}", prompt="hello", max_tokens=8, **GREEDY)
        for i in range(3):
            m = cl.final(f"s{i}")
            check(m["type"] == "final" and m["usage"]["completion_tokens"] == 8, f"final {m}")
    finally:
        cl.close()
    doc = inst.stat_json()
    check_four_ready(doc)
    st = {s["name"]: s for s in doc["stages"]}
    check(st["tokenizerd"]["counters"]["requests_accepted"] == 3, "accepted counter")
    check(st["postprocd"]["counters"]["finals"] == 3, "finals counter")
    check(st["launcherd"]["histograms"]["forward_us"]["count"] > 0, "forward histogram")
    check(st["postprocd"]["histograms"]["ttft_us"]["count"] == 3, "ttft histogram")
    kv = doc["kv"]
    check(kv["used"] + kv["free"] + kv["cached"] == kv["blocks"], f"kv gauges {kv}")
    check(doc["config"]["model"] == inst.model, "config model path")
    check(isinstance(doc["requests"]["list"], list), "request list")
    lat = inst.stat("--latency-table")
    check(lat.returncode == 0, lat.stderr)
    rows = {tuple(line.split()[:2]): line.split()[2] for line in lat.stdout.splitlines()[1:]
            if len(line.split()) >= 8}
    for key in (("tokenizerd", "tokenize"), ("schedulerd", "queue_wait"),
                ("schedulerd", "plan"), ("launcherd", "forward"), ("postprocd", "detokenize"),
                ("postprocd", "ttft"), ("postprocd", "tpot")):
        check(key in rows and int(rows[key]) > 0, f"latency row {key}: {rows.get(key)}")
    once = inst.stat("--once")
    check(once.returncode == 0 and "all stages ready" in once.stdout, once.stdout[:400])
    check(inst.stop(signal.SIGTERM) == 0, "ops/serve exit status after SIGTERM")


@with_instance
def test_supervisor_kill_no_orphans_and_recovery(inst):
    """SIGKILL of supervisord kills every stage (PR_SET_PDEATHSIG); ops/serve keeps the
    segment and exits 1; a new ops/serve comes up on the leftover segment (same epoch),
    and a request accepted before the kill completes with the same greedy output as a
    request that never saw a crash."""
    inst.start()
    doc = inst.wait_ready()
    epoch = doc["epoch"]
    pids = [s["pid"] for s in doc["stages"]]
    cl = Client(inst.rundir)
    try:
        n = 3000
        cl.generate("long", prompt="once upon a time", max_tokens=n, **GREEDY)
        os.kill(inst.supervisord_pid(), signal.SIGKILL)
        # Leave postprocd's socket now, while nothing listens: a DEALER kept open would
        # reconnect to the new postprocd under our routing id, and closing it only when the
        # new one connects lets libzmq's ROUTER_HANDOVER (4.3.4) process the old connection's
        # handshake after the new one's, hand our id to the dying connection and leave the
        # new one attached to nothing (a CI failure: 'unreachable' for 30 s after welcome).
        cl.disconnect_out()
        check_gone(inst, pids, "after SIGKILL of supervisord")
        check(inst.proc.wait(timeout=DEADLINE) == 1, "ops/serve status after supervisord died")
        check(inst.segment_exists(), "segment must be kept for recovery")
        left = inst.stat_json()
        check(not any(s["alive"] for s in left["stages"]), "a stage is alive after the kill")
        mid = [r for r in left["requests"]["list"] if r["id"] == "long"]
        check(len(mid) == 1 and mid[0]["n_output"] < n,
              f"the request should be in flight at the kill: {mid}")
        inst.start()
        doc2 = inst.wait_ready()
        check(doc2["epoch"] == epoch, "the leftover segment was not reused")
        check(all(b["inc"] > a["inc"] for a, b in zip(doc["stages"], doc2["stages"])),
              "every stage must run as a new incarnation")
        cl.connect_out()
        cl.resume("long", 0)
        got = cl.final("long")
        check(got["type"] == "final", f"after recovery: {got}")
        check(got["usage"]["completion_tokens"] == n, f"usage {got['usage']}")
        cl.generate("ref", prompt="once upon a time", max_tokens=n, **GREEDY)
        ref = cl.final("ref")
        check(ref["type"] == "final" and ref["text"] == got["text"] and
              ref["tokens"] == got["tokens"], "output differs from an uninterrupted run")
    finally:
        cl.close()
    check(inst.stop(signal.SIGINT) == 0, "clean stop after recovery")
    check(not inst.segment_exists(), "segment left after the clean stop")


def kill_stage_until_escalation(inst, stage, times):
    """SIGKILLs `stage` `times` times, each time after supervisord brought it back."""
    for _ in range(times):
        def current():
            r = inst.stat("--json", "--requests", "0")
            if r.returncode != 0:
                return None
            s = json.loads(r.stdout)["stages"][STAGES.index(stage)]
            return s["pid"] if s["ready"] else None
        pid = wait_for(f"{stage} ready", current)
        os.kill(pid, signal.SIGKILL)
        wait_for(f"{stage} pid {pid} to end", lambda: not pid_running(pid))


def test_crash_loop_escalates_to_new_epoch():
    """More than --max-restarts SIGKILLs of one stage within the window make the listener
    restart the whole pipeline on a new segment (new epoch); requests in flight then are
    reported lost to their clients, never silence: at the protocol level `resume` is answered
    with not_found, and ringserve-cli (the client library) fails its request as lost; the
    new pipeline serves."""
    with_instance(crash_loop_case, Instance.SMALL)()


def crash_loop_case(inst):
    inst.start("--max-restarts", "2", "--restart-window", "120", "--client-timeout-ms",
               "600000")
    epoch = inst.wait_ready()["epoch"]
    cl = Client(inst.rundir)
    cli = None
    try:
        # The client leaves postprocd right after the ack, so the request stays in the table
        # (its final undelivered) however fast it generates: in flight when the loop escalates.
        cl.generate("lost", prompt="x", max_tokens=64, **GREEDY)
        cl.disconnect_out()
        # A 4000-token request through the client library: still generating at the escalation.
        cli = subprocess.Popen([os.path.join(BIN, "ringserve-cli"), "--instance", inst.name,
                                "--rundir", inst.rundir, "--id", "cli", "--max-tokens", "4000",
                                "--temperature", "0", "--ignore-eos", "--stall", "300", "y"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_for("both requests in the table", lambda: sorted(
            r["id"] for r in inst.stat_json()["requests"]["list"]) == ["cli", "lost"])
        kill_stage_until_escalation(inst, "postprocd", 3)
        wait_for("the escalation in crashloop.log",
                 lambda: "whole-pipeline restart done" in inst.log("crashloop.log"))
        doc = wait_for("a ready pipeline on a new segment", lambda: (
            lambda d: d if d and d["ready"] and d["epoch"] != epoch else None)(
                json.loads(inst.stat("--json").stdout or "null")))
        check_four_ready(doc)
        check(doc["requests"]["list"] == [], "the new segment must start empty")
        cl.connect_out()
        cl.resume("lost", 0)
        m = cl.final("lost")
        check(m["type"] == "error" and m["code"] == "not_found", f"lost request: {m}")
        _, err = cli.communicate(timeout=DEADLINE)
        check(cli.returncode == 1 and "request 'cli' lost: not_found" in err,
              f"ringserve-cli: status {cli.returncode}, stderr {err.strip()[-500:]}")
        cl.generate("after", prompt="x", max_tokens=4, **GREEDY)
        m = cl.final("after")
        check(m["type"] == "final" and m["usage"]["completion_tokens"] == 4, f"after: {m}")
    finally:
        cl.close()
        if cli is not None and cli.poll() is None:
            cli.kill()
            cli.wait()
    check(inst.stop(signal.SIGINT) == 0, "clean stop after the escalation")
    check(not inst.segment_exists(), "segment left")


@with_instance
def test_persistent_crash_loop_gives_up(inst):
    """A stage that can never start (tokenizerd and postprocd get an option they refuse)
    makes the listener escalate, then give up: everything stops, the segment is removed,
    and ops/serve exits 1 saying why."""
    inst.start("--listen", "tcp://127.0.0.1:1", "--max-restarts", "1", "--max-escalations",
               "1", "--startsecs", "1")
    rc = inst.proc.wait(timeout=DEADLINE * 2)
    with open(inst.out_path, errors="replace") as f:
        out = f.read()
    check(rc == 1, f"ops/serve exit status {rc}")
    check("gave up" in out, "ops/serve must say it gave up")
    log = inst.log("crashloop.log")
    check("whole-pipeline restart 1" in log and "crash loop persists" in log, log[-1500:])
    check_gone(inst, [], "after giving up")
    check(not inst.segment_exists(), "segment left after giving up")


@with_instance
def test_hung_stage_is_killed_and_restarted(inst):
    """A stage that stops heartbeating (SIGSTOP) is killed by the listener after
    --hang-timeout and restarted by supervisord; the pipeline is ready again."""
    inst.start("--hang-timeout", "2")
    doc = inst.wait_ready()
    old = doc["stages"][STAGES.index("schedulerd")]
    os.kill(old["pid"], signal.SIGSTOP)
    wait_for("the hung schedulerd to be killed", lambda: not pid_running(old["pid"]))
    doc2 = inst.wait_ready()
    new = doc2["stages"][STAGES.index("schedulerd")]
    check(new["pid"] != old["pid"] and new["inc"] > old["inc"], f"not restarted: {new}")
    check(doc2["epoch"] == doc["epoch"], "a single hang must not restart the whole pipeline")
    check("hung: no heartbeat" in inst.log("crashloop.log"), "listener log")
    check(inst.stop(signal.SIGINT) == 0, "clean stop")


def test_systemd_units_verify():
    """ops/systemd's units pass `systemd-analyze verify` without a warning, instantiated
    with this build's binaries and the current user in place of the placeholders."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        raise Skip("systemd-analyze is not installed")
    src = os.path.join(SRC, "ops", "systemd")
    tmp = tempfile.mkdtemp(prefix="rs-ops-units-")
    try:
        import grp
        import pwd
        user = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(os.getgid()).gr_name
        units = sorted(f for f in os.listdir(src) if "@." in f)
        check(len(units) == 9, f"expected 9 unit templates, found {units}")
        for f in units:
            with open(os.path.join(src, f)) as fin, open(os.path.join(tmp, f), "w") as fout:
                fout.write(fin.read().replace("/usr/local/bin/", BIN + "/")
                           .replace("User=ringserve", "User=" + user)
                           .replace("Group=ringserve", "Group=" + group))
        names = [u.replace("@.", "@ci.") for u in units]
        r = subprocess.run([tool, "verify", *names], cwd=tmp, capture_output=True, text=True,
                           timeout=DEADLINE)
        check(r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(),
              f"systemd-analyze verify: {r.returncode}\n{r.stdout}{r.stderr}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


CASES = {n[len("test_"):]: f for n, f in globals().items() if n.startswith("test_")}


def main(argv):
    names = argv[1:] or list(CASES)
    for n in names:
        if n not in CASES:
            print(f"test_ops: no case '{n}' (have: {', '.join(CASES)})", file=sys.stderr)
            return 2
    for n in names:
        t0 = time.monotonic()
        try:
            CASES[n]()
        except Failure as e:
            print(f"FAIL {n}: {e}", file=sys.stderr)
            return 1
        except Skip as e:
            print(f"skip {n}: {e}")
            return 77
        print(f"ok {n} ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
