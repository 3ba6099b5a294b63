#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Injected faults in a real daemon's start-up: tokenizerd run with RS_SYS_FAIL=call:n
(ipc/failpoint_sys.h) for each call of the table and its first calls. Each run must end
in exit status 1 with an ERROR line (a clear error), or, where the daemon retries or
tolerates the failure, go on to serve and stop cleanly on SIGTERM (exit 0); never die by
a signal. The exhaustive walk over every call is tests/unit/test_failpoint_sys.c; this
proves the same holds through a whole daemon. ctest: `it.ops_faults.<case>`.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ops as ops  # noqa: E402
from test_ops import check  # noqa: E402

CALLS = ("shm_open", "ftruncate", "fallocate", "mmap", "mlock", "malloc", "calloc",
         "zmq_socket", "zmq_bind", "zmq_connect", "zmq_setsockopt", "zmq_poll",
         "zmq_msg_recv", "zmq_send")
FIRST = 3  # calls of each slot made to fail, one run each


def run_once(d, model, spec):
    """Runs tokenizerd with `spec`; returns (outcome, log)."""
    name = f"faults-{os.getpid()}"
    log = os.path.join(d, "out")
    env = dict(os.environ, RS_SYS_FAIL=spec)
    with open(log, "wb") as out:
        p = subprocess.Popen([os.path.join(ops.BIN, "tokenizerd"), "--instance", name,
                              "--model", model, "--rundir", os.path.join(d, "run")],
                             stdout=out, stderr=subprocess.STDOUT, env=env)
    end = time.monotonic() + ops.DEADLINE
    outcome = None
    while outcome is None and time.monotonic() < end:
        rc = p.poll()
        with open(log, errors="replace") as f:
            text = f.read()
        if rc is not None:
            outcome = rc
        elif "serving on" in text:
            p.send_signal(signal.SIGTERM)
            outcome = "served:" + str(p.wait(timeout=ops.DEADLINE))
        else:
            time.sleep(0.02)
    if outcome is None:
        p.kill()
        p.wait()
    subprocess.run([os.path.join(ops.BIN, "ringserve-shm"), "rm", f"/ringserve-{name}"],
                   capture_output=True)
    with open(log, errors="replace") as f:
        return outcome, f.read()


def test_tokenizerd_startup_faults_are_clear_errors_or_retries():
    d = tempfile.mkdtemp(prefix="rs-ops-faults-")
    try:
        model = os.path.join(d, "m.gguf")
        subprocess.run([os.path.join(ops.BIN, "ringserve-mkmodel"), "-o", model,
                        *ops.Instance.TINY, "--vocab", "512", "--ctx", "512", "--seed", "7"],
                       check=True, capture_output=True)
        errors = 0
        for call in CALLS:
            for n in range(1, FIRST + 1):
                outcome, log = run_once(d, model, f"{call}:{n}")
                check(outcome is not None, f"{call}:{n}: tokenizerd neither failed nor served")
                if outcome == 1:
                    check(" ERROR " in log, f"{call}:{n}: exit 1 without an ERROR line:\n{log}")
                    errors += 1
                else:
                    check(outcome == "served:0",
                          f"{call}:{n}: tokenizerd ended with {outcome}:\n{log[-3000:]}")
        check(errors >= len(CALLS), f"only {errors} runs failed: are the faults reaching it?")
    finally:
        shutil.rmtree(d, ignore_errors=True)


CASES = {n[len("test_"):]: f for n, f in globals().items() if n.startswith("test_")}

if __name__ == "__main__":
    ops.CASES = CASES
    sys.exit(ops.main(sys.argv))
