#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ops/serve's runtime directory and lock against a hostile local user: a runtime
directory planted as a symlink or owned by someone else is refused before anything
runs, and a symlink planted at the lock's old predictable /tmp path, or at the lock
in the per-user lock directory, is never followed. Real ops/serve, real supervisord,
the four real daemons (fixtures from test_ops.py). ctest: `it.ops_rundir.<case>`.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ops as ops  # noqa: E402
from test_ops import check, with_instance  # noqa: E402


def serve_refused(inst, why):
    """Starts ops/serve and expects it to exit nonzero naming `why`, starting nothing."""
    inst.start()
    rc = inst.proc.wait(timeout=ops.DEADLINE)
    with open(inst.out_path, errors="replace") as f:
        out = f.read()
    check(rc != 0, f"ops/serve accepted a hostile runtime directory:\n{out}")
    check(why in out, f"refusal does not say '{why}':\n{out}")
    check(not inst.segment_exists(), "a segment was created although ops/serve refused")


@with_instance
def test_symlinked_rundir_is_refused(inst):
    """A runtime directory that is a symlink (to a directory the planter reads) is refused;
    nothing is created behind the link."""
    target = tempfile.mkdtemp(prefix="rs-ops-victim-")
    try:
        os.symlink(target, inst.rundir)
        serve_refused(inst, "not a symlink")
        check(os.listdir(target) == [], f"files created behind the link: {os.listdir(target)}")
    finally:
        os.unlink(inst.rundir)
        os.rmdir(target)


@with_instance
def test_foreign_or_open_rundir_is_refused(inst):
    """A runtime directory another user owns (as root: chowned to nobody), or one open to
    others (mode 0777), is refused with its owner or mode named."""
    os.mkdir(inst.rundir, 0o700)
    os.chmod(inst.rundir, 0o777)
    if os.geteuid() == 0:
        os.chown(inst.rundir, 65534, 65534)
        serve_refused(inst, "owned by uid 65534")
    else:
        serve_refused(inst, "mode 0777")


@with_instance
def test_planted_lock_links_are_not_followed(inst):
    """Links planted at the old /tmp lock path and at the instance's lock in the lock
    directory: the first is ignored, the second makes ops/serve refuse; neither target is
    created."""
    victim = os.path.join(inst.dir, "victim")
    old = f"/tmp/ringserve-{os.getuid()}-{inst.name}.lock"
    mine = os.path.join(ops.lock_dir(), f"{inst.name}.lock")
    os.symlink(victim, old)
    try:
        os.makedirs(ops.lock_dir(), 0o700, exist_ok=True)
        os.symlink(victim, mine)
        serve_refused(inst, f"{inst.name}.lock")
        check(not os.path.lexists(victim), "the planted lock link was followed")
        os.unlink(mine)
        inst.start()
        inst.wait_ready()
        check(not os.path.lexists(victim), "the old /tmp lock link was followed")
        check(os.path.isfile(mine) and not os.path.islink(mine), "lock not in the lock directory")
        check(inst.stop() == 0, "clean stop")
    finally:
        os.unlink(old)


CASES = {n[len("test_"):]: f for n, f in globals().items() if n.startswith("test_")}

if __name__ == "__main__":
    ops.CASES = CASES
    sys.exit(ops.main(sys.argv))
