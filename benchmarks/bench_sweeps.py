"""Wall and CPU time of the four torch GPT sweeps at their default (CPU) parameters, against the target of
≤ 4 minutes for all four on 2 cores. Prints its figures; writes nothing. Not a timed test.

    .venv/bin/python benchmarks/bench_sweeps.py [--sweeps segments depth seq-hidden layer-timing] [--params JSON]

Each sweep runs in this process as `remat experiment sweep-<name>` would (same function, same defaults);
its progress lines go to stderr. CPU time is this process's (time.process_time): on a busy machine the wall
time grows while the CPU time does not.
"""

from __future__ import annotations

import argparse
import json
import time

from remat.experiments import load, resolve

TARGET_S = 240.0
SWEEPS = ("segments", "depth", "seq-hidden", "layer-timing")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", nargs="+", choices=SWEEPS, default=list(SWEEPS))
    parser.add_argument("--params", type=json.loads, default={}, help="parameters passed to every sweep")
    args = parser.parse_args()
    rows, wall_total, cpu_total = [], 0.0, 0.0
    for name in args.sweeps:
        wall, cpu = time.perf_counter(), time.process_time()
        frame = resolve(f"sweep-{name}")(load(f"sweep-{name}", dict(args.params)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        wall_total, cpu_total = wall_total + wall, cpu_total + cpu
        rows.append((name, len(frame), int((frame["status"] == "ok").sum()), wall, cpu))
    print(f"{'sweep':14s} {'points':>6s} {'ok':>4s} {'wall s':>8s} {'CPU s':>8s}")
    for name, points, ok, wall, cpu in rows:
        print(f"{name:14s} {points:6d} {ok:4d} {wall:8.1f} {cpu:8.1f}")
    print(f"{'total':14s} {'':6s} {'':4s} {wall_total:8.1f} {cpu_total:8.1f}   target ≤ {TARGET_S:.0f} s wall: "
          f"{'met' if wall_total <= TARGET_S else 'NOT met'}")


if __name__ == "__main__":
    main()
