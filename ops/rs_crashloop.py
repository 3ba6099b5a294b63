#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Crash-loop escalation for one ringserve instance under supervisord.

A supervisord event listener (supervisord's listener protocol on stdin/stdout,
Python 3 standard library only). supervisord restarts each stage on its own
(one_for_one); this counts those restarts per stage and, when one stage
restarts more than --max-restarts times within --window seconds (the OTP
restart intensity, DESIGN.md §3), escalates to a whole-pipeline restart: stop
all four stages, remove the shared-memory segment, start all four again, so
they create a new segment with a new epoch. Requests in flight then are lost;
clients learn it from an error (postprocd answers `resume` of an unknown id
with `not_found`), never from silence. If escalations themselves repeat
(--max-escalations within --escalation-window seconds) the fault is not
transient: the listener stops everything, removes the segment, writes
--gave-up-file and shuts supervisord down, so the operator (or systemd) sees
a failed service instead of an endless loop.

Counted as restarts: PROCESS_STATE_EXITED (a stage that was running ended;
autorestart brings it back) and PROCESS_STATE_BACKOFF (a start that failed
within startsecs). PROCESS_STATE_FATAL (supervisord gave up starting a stage)
escalates at once. Stops requested through supervisord (operator, this
listener) produce none of these events, and events while supervisord shuts
down are ignored.

Hangs: supervisord only sees deaths. On every TICK_5 event the listener reads
each stage's heartbeat from shared memory (ringserve-stat --json); a ready
stage whose heartbeat is older than --hang-timeout seconds is SIGKILLed (after
checking that supervisord knows the same pid), so supervisord restarts it and
the restart counts like any other: the equivalent of systemd's WatchdogSec.

"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import xmlrpc.client


def log(msg):
    """Lines on stderr go to the listener's log file; stdout is the protocol channel."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    sys.stderr.write(f"{stamp}Z crashloop[{os.getpid()}] {msg}\n")
    sys.stderr.flush()


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over supervisord's unix socket (its XML-RPC endpoint)."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class UnixTransport(xmlrpc.client.Transport):
    def __init__(self, path, timeout=60.0):
        super().__init__()
        self.unix_path = path
        self.io_timeout = timeout

    def make_connection(self, host):
        return UnixHTTPConnection(self.unix_path, self.io_timeout)


def rpc_proxy(server_url):
    """supervisord's XML-RPC interface from SUPERVISOR_SERVER_URL (unix:// or http://)."""
    if server_url.startswith("unix://"):
        return xmlrpc.client.ServerProxy(
            "http://localhost/RPC2", transport=UnixTransport(server_url[len("unix://"):]))
    return xmlrpc.client.ServerProxy(server_url.rstrip("/") + "/RPC2")


def parse_header(line):
    return dict(tok.split(":", 1) for tok in line.split() if ":" in tok)


class Escalator:
    """Restart history per stage and the escalation policy."""

    def __init__(self, args, rpc):
        self.args = args
        self.rpc = rpc
        self.restarts = {}
        self.escalations = []

    def on_event(self, name, payload):
        if name.startswith("TICK_"):
            self.check_hangs()
            return
        proc = payload.get("processname", "")
        if payload.get("groupname") != self.args.group:
            return
        if self.rpc.supervisor.getState().get("statecode") != 1:
            return  # supervisord is shutting down: its own stops are no crash loop
        now = time.monotonic()
        if name == "PROCESS_STATE_FATAL":
            log(f"{proc} is FATAL (supervisord gave up starting it)")
            self.escalate(f"{proc} could not be started")
            return
        hist = self.restarts.setdefault(proc, [])
        hist.append(now)
        while hist and hist[0] < now - self.args.window:
            hist.pop(0)
        how = ("exited" if name == "PROCESS_STATE_EXITED" else "failed to start")
        log(f"{proc} {how} (pid {payload.get('pid', '-')}, from {payload.get('from_state', '?')}"
            f", expected {payload.get('expected', '-')}): {len(hist)} restart(s) in the last "
            f"{self.args.window:g} s")
        if len(hist) > self.args.max_restarts:
            self.escalate(f"{proc} restarted {len(hist)} times within {self.args.window:g} s")

    def check_hangs(self):
        """Kills ready stages whose heartbeat stopped (SIGSTOP, deadlock, endless loop)."""
        if self.args.hang_timeout <= 0:
            return
        stat = os.path.join(self.args.bin, "ringserve-stat")
        try:
            r = subprocess.run([stat, "--instance", self.args.instance, "--json", "--requests",
                                "0"], capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            log("ringserve-stat did not answer within 10 s; hang check skipped")
            return
        if r.returncode != 0:
            return  # not running (yet): nothing to watch
        for st in json.loads(r.stdout)["stages"]:
            age_s = st["heartbeat_age_ms"] / 1000.0
            if not st["ready"] or age_s <= self.args.hang_timeout:
                continue
            info = self.rpc.supervisor.getProcessInfo(f"{self.args.group}:{st['name']}")
            if info.get("pid") != st["pid"] or info.get("statename") != "RUNNING":
                continue  # not the process supervisord runs now: not ours to kill
            log(f"{st['name']} (pid {st['pid']}) hung: no heartbeat for {age_s:.1f} s "
                f"(limit {self.args.hang_timeout:g} s); killing it so supervisord restarts it")
            try:
                os.kill(st["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop_all(self):
        """Stops every stage of the group at once and waits until all are stopped."""
        for r in self.rpc.supervisor.stopProcessGroup(self.args.group, True):
            if r.get("status") not in (80, 70):  # SUCCESS, NOT_RUNNING
                log(f"stopping {r.get('name')}: {r.get('description')}")

    def remove_segment(self):
        tool = os.path.join(self.args.bin, "ringserve-shm")
        seg = "/ringserve-" + self.args.instance
        r = subprocess.run([tool, "rm", seg], capture_output=True, text=True)
        if r.returncode == 0:
            log(f"removed segment {seg}")
        elif not os.path.exists("/dev/shm" + seg):
            log(f"segment {seg} was already gone")
        else:
            log(f"could not remove segment {seg}: {r.stderr.strip()}")

    def escalate(self, why):
        now = time.monotonic()
        self.escalations = [t for t in self.escalations if t >= now - self.args.escalation_window]
        self.escalations.append(now)
        n = len(self.escalations)
        if n > self.args.max_escalations:
            self.give_up(why, n)
            return
        log(f"crash loop: {why}: whole-pipeline restart {n} of at most "
            f"{self.args.max_escalations} per {self.args.escalation_window:g} s (new segment, "
            f"new epoch; requests in flight are lost and their clients get errors)")
        self.stop_all()
        self.remove_segment()
        self.restarts.clear()
        for r in self.rpc.supervisor.startProcessGroup(self.args.group, False):
            if r.get("status") not in (80, 60):  # SUCCESS, ALREADY_STARTED
                log(f"starting {r.get('name')}: {r.get('description')}")
        log("whole-pipeline restart done: all stages started again")

    def give_up(self, why, n):
        log(f"crash loop persists: {why}, after {n - 1} whole-pipeline restarts within "
            f"{self.args.escalation_window:g} s; stopping the instance (see the stage logs)")
        self.stop_all()
        self.remove_segment()
        if self.args.gave_up_file:
            with open(self.args.gave_up_file, "w") as f:
                f.write(f"{why}; {n - 1} whole-pipeline restarts did not help\n")
        try:
            self.rpc.supervisor.shutdown()
        except (xmlrpc.client.Fault, OSError) as e:
            log(f"supervisord shutdown: {e}")


def serve(esc):
    """The listener protocol: READY, read one event, act, RESULT, repeat until EOF."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        stdout.write(b"READY\n")
        stdout.flush()
        line = stdin.readline()
        if not line:
            log("supervisord closed the event channel; exiting")
            return 0
        hdr = parse_header(line.decode("utf-8", "replace"))
        body = stdin.read(int(hdr.get("len", "0")))
        try:
            esc.on_event(hdr.get("eventname", ""), parse_header(body.decode("utf-8", "replace")))
        except Exception as e:  # one bad event must not take the listener (and its history) down
            log(f"handling {hdr.get('eventname')}: {type(e).__name__}: {e}")
        stdout.write(b"RESULT 2\nOK")
        stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instance", required=True)
    ap.add_argument("--bin", required=True, help="directory holding ringserve-shm")
    ap.add_argument("--group", default="ringserve",
                    help="the supervisord group holding the four stages")
    ap.add_argument("--max-restarts", type=int, default=5)
    ap.add_argument("--window", type=float, default=30.0, help="seconds")
    ap.add_argument("--max-escalations", type=int, default=3)
    ap.add_argument("--escalation-window", type=float, default=600.0, help="seconds")
    ap.add_argument("--hang-timeout", type=float, default=30.0,
                    help="seconds without a heartbeat before a ready stage is killed; 0: off")
    ap.add_argument("--gave-up-file", default="")
    ap.add_argument("--server-url", default=os.environ.get("SUPERVISOR_SERVER_URL", ""))
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # supervisord stopping us: clean exit
    if not args.server_url:
        log("no supervisord server URL (SUPERVISOR_SERVER_URL unset and no --server-url)")
        return 2
    if args.max_restarts < 1 or args.window <= 0 or args.max_escalations < 0:
        log("--max-restarts must be >= 1, --window > 0, --max-escalations >= 0")
        return 2
    log(f"watching group {args.group} of instance {args.instance}: escalate after more than "
        f"{args.max_restarts} restarts of one stage in {args.window:g} s; kill a stage without "
        f"heartbeat for {args.hang_timeout:g} s")
    return serve(Escalator(args, rpc_proxy(args.server_url)))


if __name__ == "__main__":
    sys.exit(main())
