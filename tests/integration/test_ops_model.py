#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The model file changing under a serving instance: its weights rewritten in place,
then the file truncated. launcherd must keep serving (same pid, never restarted) and
keep giving byte-identical greedy output, because it serves from a private copy of
the weights. Real ops/serve, supervisord and the four daemons (fixtures from
test_ops.py). ctest: `it.ops_model.<case>`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ops as ops  # noqa: E402
from test_ops import GREEDY, Client, check, with_instance  # noqa: E402


def launcherd_pid(inst):
    return next(s["pid"] for s in inst.stat_json()["stages"] if s["name"] == "launcherd")


@with_instance
def test_model_file_rewritten_or_truncated_changes_nothing(inst):
    inst.start()
    inst.wait_ready()
    pid = launcherd_pid(inst)
    cl = Client(inst.rundir)
    try:
        cl.generate("ref", prompt="once upon a time", max_tokens=24, **GREEDY)
        ref = cl.final("ref")
        check(ref["type"] == "final", f"reference request: {ref}")
        size = os.path.getsize(inst.model)
        with open(inst.model, "r+b") as f:  # the weights (most of the file) zeroed in place
            f.seek(size // 3)
            f.write(bytes(size - size // 3))
        cl.generate("rewritten", prompt="once upon a time", max_tokens=24, **GREEDY)
        got = cl.final("rewritten")
        check(got["type"] == "final" and got["tokens"] == ref["tokens"],
              f"output changed after the file was rewritten: {got} vs {ref}")
        os.truncate(inst.model, 4096)
        cl.generate("truncated", prompt="once upon a time", max_tokens=24, **GREEDY)
        got = cl.final("truncated")
        check(got["type"] == "final" and got["tokens"] == ref["tokens"] and
              got["text"] == ref["text"], f"output changed after truncation: {got} vs {ref}")
        check(launcherd_pid(inst) == pid and ops.pid_running(pid),
              "launcherd was restarted: the file change reached it")
        check("SIGBUS" not in inst.log("launcherd.log"), "launcherd log mentions SIGBUS")
    finally:
        cl.close()
    check(inst.stop() == 0, "clean stop")


CASES = {n[len("test_"):]: f for n, f in globals().items() if n.startswith("test_")}

if __name__ == "__main__":
    ops.CASES = CASES
    sys.exit(ops.main(sys.argv))
