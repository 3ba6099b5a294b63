#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gatewayd under ops/serve (real supervisord), Python 3 standard library only:
ops/serve starts it on --http-port beside the four stages, it answers
completions, a SIGKILLed gatewayd is restarted by supervisord on the same port
(how long that took is printed: supervisord reacts on its 1 s loop, see
ops/README.md), a whole-pipeline restart leaves it serving the new segment,
--no-http starts none, a non-loopback --http-host without --api-key is refused
before anything starts, and Ctrl-C leaves no process and closes the port.
Each `def test_<case>()` is the ctest `it.gateway_serve.<case>`; exit 0 pass,
1 fail. Waits are deadlines, never speed assertions.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("RS_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BIN = os.environ.get("RS_BIN") or os.path.join(SRC, "build", "bin")
DEADLINE = 90.0


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def wait_for(what, fn, timeout=DEADLINE, step=0.02):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise Failure(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def request(port, method, path, body=None):
    """(status, parsed JSON or text), or (None, None) when nothing answers."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data.decode("utf-8", "replace")
    except OSError:
        return None, None


class Serve:
    """One ops/serve run on a tiny random model."""

    def __init__(self, case):
        self.name = f"gws-{case[:20]}-{os.getpid()}"
        self.dir = tempfile.mkdtemp(prefix="rs-gws-")
        self.state = os.path.join(self.dir, "state")
        self.model = os.path.join(self.dir, "tiny.gguf")
        self.port = free_port()
        self.proc = None
        subprocess.run([os.path.join(BIN, "ringserve-mkmodel"), "-o", self.model, "--dim", "64",
                        "--layers", "2", "--heads", "4", "--ffn", "128", "--vocab", "512",
                        "--ctx", "1024", "--seed", "7"], check=True, capture_output=True)

    def argv(self, *extra):
        return [os.path.join(SRC, "ops", "serve"), "--model", self.model, "--instance",
                self.name, "--bin", BIN, "--state-dir", self.state, "--rundir",
                os.path.join(self.dir, "run"), "--threads", "1", "--http-port", str(self.port),
                *extra]

    def start(self, *extra):
        self.out = os.path.join(self.dir, "serve.out")
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen(self.argv(*extra), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def healthy(self):
        return request(self.port, "GET", "/health")[0] == 200

    def gatewayd_pid(self):
        for d in os.listdir("/proc"):
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"/gatewayd") and self.name.encode() in cmd:
                return int(d)
        return None

    def processes(self):
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
                with open(f"/proc/{d}/stat") as f:
                    zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
            except (OSError, IndexError):
                continue
            if (self.name in cmd or self.state in cmd) and not zombie:
                found.append((int(d), cmd.strip()))
        return found

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(timeout=DEADLINE)

    def dump(self):
        for path in [self.out, os.path.join(self.state, "log", "gatewayd.log")]:
            try:
                with open(path, errors="replace") as f:
                    sys.stderr.write(f"--- {path} ---\n{f.read()[-5000:]}\n")
            except OSError:
                pass

    def teardown(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=DEADLINE)
        for pid, _ in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run([os.path.join(BIN, "ringserve-shm"), "rm", f"/ringserve-{self.name}"],
                       capture_output=True)
        try:
            os.unlink(f"/tmp/ringserve-{os.getuid()}-{self.name}.lock")
        except FileNotFoundError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def run_case(fn, case):
    s = Serve(case)
    try:
        fn(s)
    except Exception:
        s.dump()
        raise
    finally:
        s.teardown()


def completion_ok(s):
    st, body = request(s.port, "POST", "/v1/completions",
                       {"prompt": "", "max_tokens": 8, "temperature": 0, "ignore_eos": True})
    return st == 200 and body["usage"]["completion_tokens"] == 8


def test_serve_runs_gatewayd_and_supervisord_restarts_it():
    def case(s):
        s.start()
        wait_for("gatewayd healthy", s.healthy)
        check(completion_ok(s), "completion")
        for i in range(2):
            old = s.gatewayd_pid()
            check(old is not None, "no gatewayd process")
            time.sleep(1.2)  # past startsecs: a crash of a running program, not a failed start
            os.kill(old, signal.SIGKILL)
            t0 = time.monotonic()
            wait_for("gatewayd back", lambda: s.healthy() and s.gatewayd_pid() not in (None, old))
            print(f"restart {i}: serving again {1000 * (time.monotonic() - t0):.0f} ms after "
                  "the SIGKILL (supervisord's reaction included)")
            check(completion_ok(s), f"completion after restart {i}")
        check(s.stop() == 0, "ops/serve exit status")
        check(not s.processes(), f"left behind: {s.processes()}")
        check(request(s.port, "GET", "/health")[0] is None, "the port still answers")
    run_case(case, "restart")


def test_whole_pipeline_restart_leaves_gatewayd_serving_the_new_segment():
    def case(s):
        s.start()
        wait_for("gatewayd healthy", s.healthy)
        pid = s.gatewayd_pid()
        conf = os.path.join(s.state, "supervisord.conf")
        seg = f"/dev/shm/ringserve-{s.name}"
        ino = os.stat(seg).st_ino
        # what the crash-loop listener does: stop the group, remove the segment, start it
        subprocess.run(["supervisorctl", "-c", conf, "stop", "ringserve:*"],
                       capture_output=True, timeout=DEADLINE)
        subprocess.run([os.path.join(BIN, "ringserve-shm"), "rm", f"/ringserve-{s.name}"],
                       capture_output=True)
        wait_for("503 while the pipeline is down", lambda: request(s.port, "GET", "/health")[0]
                 == 503)
        subprocess.run(["supervisorctl", "-c", conf, "start", "ringserve:*"],
                       capture_output=True, timeout=DEADLINE)
        wait_for("healthy on the new segment", lambda: s.healthy() and completion_ok(s))
        check(s.gatewayd_pid() == pid, "gatewayd was restarted too")
        check(os.stat(seg).st_ino != ino, "not a new segment")
        check(s.stop() == 0, "ops/serve exit status")
    run_case(case, "epoch")


def test_no_http_starts_no_gatewayd():
    s = Serve("nohttp")
    try:
        r = subprocess.run(s.argv("--no-http", "--print-config"), capture_output=True, text=True)
        check(r.returncode == 0 and "[program:gatewayd]" not in r.stdout, "--no-http config")
        r = subprocess.run(s.argv("--print-config"), capture_output=True, text=True)
        check(r.returncode == 0 and "[program:gatewayd]" in r.stdout and
              f"--http-port {s.port}" in r.stdout, "default config has gatewayd")
    finally:
        s.teardown()


def test_non_loopback_http_needs_an_api_key():
    s = Serve("nokey")
    try:
        r = subprocess.run(s.argv("--http-host", "0.0.0.0"), capture_output=True, text=True,
                           timeout=DEADLINE)
        check(r.returncode == 2 and "--api-key" in r.stderr, f"exit {r.returncode}: {r.stderr}")
        check(not s.processes(), "something started")
    finally:
        s.teardown()


CASES = {n[len("test_"):]: f for n, f in globals().items() if n.startswith("test_")}


def main(argv):
    names = argv[1:] or list(CASES)
    for n in names:
        if n not in CASES:
            print(f"test_gateway_serve: no case '{n}'", file=sys.stderr)
            return 2
        t0 = time.monotonic()
        try:
            CASES[n]()
        except Failure as e:
            print(f"FAIL {n}: {e}", file=sys.stderr)
            return 1
        print(f"ok {n} ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
