"""Wall time of the Korthikanti accounting: the four Table 3 models × every Table 2 configuration (six TP
techniques at t = 8, three without parallelism), one layer each under FakeTensorMode, in one process.
Target: ≤ 30 s in total on the project's 2-core CPU. Prints the figure; not a timed test.

    .venv/bin/python benchmarks/bench_account.py [--tp 8]
"""

from __future__ import annotations

import argparse
import resource
import time

from remat.accounting import account_layer
from remat.experiments.korthikanti import configurations
from remat.paper import TABLE3_MODELS

TARGET_S = 30.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tp", type=int, default=8)
    args = parser.parse_args()
    start = time.perf_counter()
    worst = 0.0
    count = 0
    for model in TABLE3_MODELS:
        model_start = time.perf_counter()
        for _, t, sp, mode in configurations(args.tp):
            acc = account_layer(model, mode, t, sp)
            worst = max(worst, abs(acc.rel_error))
            count += 1
        print(f"{model:12s} {len(configurations(args.tp))} configurations  {time.perf_counter() - model_start:6.2f} s")
    total = time.perf_counter() - start
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"accounted {count} model × mode points in {total:.2f} s (target ≤ {TARGET_S:.0f} s: "
          f"{'met' if total <= TARGET_S else 'MISSED'}); max |rel. error| vs Table 2 = {worst:.2e}; "
          f"max RSS {rss_mib:.0f} MiB")


if __name__ == "__main__":
    main()
