"""How long opening the results store takes, integrity check (PRAGMA quick_check) included, at 10k
measurements of a realistic size (20 prompts each, with their output text and accept lengths).

    python scripts/bench_store.py [--rows 10000] [--prompts 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from specsparse.study.store import ResultsStore
from specsparse.types import Measurement, PromptResult


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    prompts = tuple(
        PromptResult(f"qa-{i:03d}", "a reply of about two hundred characters " * 5, (1, 2, 1, 3, 1) * 8, 64, 1.5, 1.2, 0.5)
        for i in range(args.prompts)
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "store.sqlite"
        store = ResultsStore(path)
        start = time.perf_counter()
        for i in range(args.rows):
            m = Measurement(1.5, 0.4, 0.03, 0.9, 33.0, 64 * args.prompts, 40 * args.prompts, 2.0, per_prompt=prompts)
            store.put(f"key-{i}", m, {"candidate": {"skip_layers": [i % 30]}, "domain": {"name": "qa"}})
        fill = time.perf_counter() - start
        store.close()
        size = path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob("store.sqlite-*"))
        opens = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            ResultsStore(path).close()
            opens.append(time.perf_counter() - start)
    print(f"{args.rows} measurements x {args.prompts} prompts: {size / 2**20:.0f} MiB, filled in {fill:.0f} s; "
          f"open with quick_check: median {statistics.median(opens) * 1000:.0f} ms "
          f"(min {min(opens) * 1000:.0f}, max {max(opens) * 1000:.0f}) over {args.repeats} opens")


if __name__ == "__main__":
    main()
