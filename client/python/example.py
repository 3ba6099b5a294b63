#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Example ringserve client: stream one completion, then run several at once.

    client/python/example.py [--rundir DIR] [--instance NAME] [PROMPT]

Needs a running instance (ops/serve, or the four daemons) and Debian's
python3-zmq and python3-msgpack. The first part prints a greedy completion as
it is generated; the second submits four sampled completions of the same
prompt with different seeds and collects them with callbacks from one loop.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ringserve_client import Client, RingserveError  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rundir", help="runtime directory of the instance")
    ap.add_argument("--instance", default="default")
    ap.add_argument("prompt", nargs="?", default="Once upon a time")
    args = ap.parse_args()

    with Client(rundir=args.rundir, instance=args.instance, timeout=60) as client:
        # 1. Streaming: one event per generated token, the final last.
        try:
            for ev in client.stream(args.prompt, max_tokens=64, temperature=0):
                print(ev.text, end="", flush=True)
                if ev.final:
                    print(f"\n[{ev.finish_reason}, {ev.usage['completion_tokens']} tokens, "
                          f"server ttft {ev.timings['ttft_us'] / 1000:.1f} ms]")
        except RingserveError as e:
            sys.exit(f"example: {e}")

        # 2. Several requests in flight, gathered by callbacks while poll() runs.
        outputs = {}

        def collect(ev):
            outputs.setdefault(ev.id, []).append(ev.text)
            if ev.final and ev.status != "ok":
                print(f"request {ev.id} failed: {ev.status} {ev.error} {ev.message}",
                      file=sys.stderr)

        for seed in range(4):
            client.submit(args.prompt, callback=collect, id=f"seed-{seed}", max_tokens=32,
                          temperature=0.8, top_p=0.95, seed=seed, stream=True)
        if not client.wait(timeout=60):
            sys.exit("example: requests still running after 60 s")
        for rid in sorted(outputs):
            print(f"{rid}: {args.prompt}{''.join(outputs[rid])}")


if __name__ == "__main__":
    main()
