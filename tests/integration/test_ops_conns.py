#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Thousands of idle connections against a serving instance whose front daemons run at a
low open-file limit (prlimit on the live tokenizerd and postprocd, 256 descriptors):
libzmq used to abort its ipc listener at the limit, taking the daemon down. They must
keep running (same pids), log the connections they closed at a cap, and serve a
well-behaved client once the flood ends. Real ops/serve, supervisord and the four
daemons (fixtures from test_ops.py). ctest: `it.ops_conns.<case>`.
"""
import os
import resource
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ops as ops  # noqa: E402
from test_ops import GREEDY, Client, Skip, check, with_instance  # noqa: E402

FLOOD = 2000  # connections per daemon
LIMIT = 256   # the daemons' open-file limit during the flood


def stage_pids(inst):
    return {s["name"]: s["pid"] for s in inst.stat_json()["stages"]}


def flood(path, n):
    """n idle connections to the unix socket at path (each left open, sending nothing)."""
    socks = []
    end = time.monotonic() + ops.DEADLINE
    while len(socks) < n:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
            socks.append(s)
            continue
        except BlockingIOError:  # the listen backlog is full: the daemon accepts meanwhile
            s.close()
        except OSError as e:
            s.close()
            raise ops.Failure(f"connection {len(socks)} to {path}: {e} (the daemon died?)")
        check(time.monotonic() < end, f"{path}: {len(socks)} of {n} connections made in time")
        time.sleep(0.001)
    return socks


@with_instance
def test_idle_connection_flood_at_low_nofile_keeps_daemons_up(inst):
    if shutil.which("prlimit") is None:
        raise Skip("prlimit (util-linux) is not installed")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2 * FLOOD + 100:
        raise Skip(f"this test needs {2 * FLOOD + 100} descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (2 * FLOOD + 100 if hard == resource.RLIM_INFINITY
                                                else hard, hard))
    inst.start()
    inst.wait_ready()
    before = stage_pids(inst)
    for d in ("tokenizerd", "postprocd"):
        subprocess.run(["prlimit", "--pid", str(before[d]), f"--nofile={LIMIT}:{LIMIT}"],
                       check=True)
    socks = []
    try:
        for d in ("tokenizerd", "postprocd"):
            socks += flood(os.path.join(inst.rundir, f"{d}.sock"), FLOOD)
        now = stage_pids(inst)
        check(now == before and all(ops.pid_running(p) for p in now.values()),
              f"a daemon was restarted under the flood: {before} -> {now}")
        for d in ("tokenizerd", "postprocd"):
            log = inst.log(f"{d}.log")
            check("closed: the open-file limit is near" in log or "cap is reached" in log,
                  f"{d} logged no connection closed at a cap")
    finally:
        for s in socks:
            s.close()
    cl = Client(inst.rundir)
    try:
        cl.generate("after", prompt="once upon a time", max_tokens=8, **GREEDY)
        m = cl.final("after")
        check(m["type"] == "final" and len(m["tokens"]) == 8, f"request after the flood: {m}")
    finally:
        cl.close()
    check(stage_pids(inst) == before, "a daemon was restarted after the flood")
    check(inst.stop() == 0, "clean stop")


@with_instance
def test_oversized_message_gets_too_large_and_the_connection_stays(inst):
    """A message over the 2 MiB body limit (and within the 4 MiB frame bound) is answered
    `too_large` for the request's sender, who keeps its connection: the next generate on it
    is acknowledged and completes."""
    inst.start()
    inst.wait_ready()
    cl = Client(inst.rundir)
    try:
        cl.send(cl.tok, {"v": 2, "type": "generate", "id": "big", "prompt": "x" * (3 << 20)})
        m = cl.recv(cl.tok, ops.DEADLINE)
        check(m is not None and m.get("type") == "error" and m.get("code") == "too_large",
              f"oversized message: expected a too_large error, got {m}")
        cl.generate("next", prompt="once upon a time", max_tokens=4, **GREEDY)
        m = cl.final("next")
        check(m["type"] == "final" and len(m["tokens"]) == 4, f"request after it: {m}")
    finally:
        cl.close()
    check(inst.stop() == 0, "clean stop")


CASES = {n[len("test_"):]: f for n, f in globals().items() if n.startswith("test_")}

if __name__ == "__main__":
    ops.CASES = CASES
    sys.exit(ops.main(sys.argv))
