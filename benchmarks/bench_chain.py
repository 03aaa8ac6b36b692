"""Speed of the numpy engine: the executor's cost per layer evaluation against the plain backward, at depth
512, and the wall time of the default Chen experiments. Prints its figures; not a timed test.

    .venv/bin/python benchmarks/bench_chain.py [--layers 512] [--width 16] [--batch 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

from remat import chain, schedules
from remat import experiments
from remat.formulas import revolve as binomial


def best_of(repeat: int, fn) -> float:
    """Fastest of ``repeat`` calls of fn(), in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=512)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    net = chain.make_chain(args.layers, args.width)
    x = chain.make_input(net, args.batch)
    plain = best_of(args.repeat, lambda: chain.naive_grads(net, x))
    print(f"plain backward, L = {args.layers}: {plain * 1e3:.1f} ms")
    L = args.layers
    builders = [lambda: schedules.none(L), lambda: schedules.sqrt(L), lambda: schedules.recursive(L),
                lambda: binomial.advance_table.cache_clear() or schedules.revolve(L, schedules.default_slots(L))]
    for build in builders:
        build_s = best_of(args.repeat, build)
        schedule = build()
        seconds = best_of(args.repeat, lambda: chain.run(net, x, schedule))
        print(f"{schedule.name:>14}: {len(schedule.ops):5d} ops, {schedule.forwards:5d} forwards, "
              f"build {build_s * 1e3:6.1f} ms, run {seconds * 1e3:7.1f} ms "
              f"({seconds / schedule.forwards * 1e6:.1f} µs per forward; "
              f"{seconds / plain * L / schedule.forwards:.2f}× the plain backward's time per layer)")
    for name in ("chen-check", "chen-segments", "chen-depth", "chen-revolve"):
        params = experiments.load(name, {})
        print(f"{name} (defaults): {best_of(1, lambda: experiments.resolve(name)(params)):.2f} s")


if __name__ == "__main__":
    main()
