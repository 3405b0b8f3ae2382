"""Ray runner vs the local runner on one 16-measurement sweep (one batch, as a random search sends).

    python scripts/bench_ray.py                       # SmolLM2-135M, quickstart settings, 2 CPU workers
    python scripts/bench_ray.py --model tiny --json bench_ray.json

Measures the same 16 configurations (dense + 15 random skip sets, seed 0) with LocalRunner (this
process, torch's default thread count) and with RayRunner (num_workers workers, cpus_per_trial threads
each), checks both give the same accept length and metric per configuration, and prints wall times:
ray_total includes starting Ray and loading the model in every worker; ray_batch is the sweep alone
(what every later batch of a search costs, with the models already loaded). The local runs are timed
with torch's default thread count and with one thread: on a CPU shared with other processes, two
threads per process can be many times slower than one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def candidates(num_layers: int, n: int, seed: int = 0):
    from specsparse.types import Candidate  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    out = [Candidate()]
    while len(out) < n:
        k = int(rng.integers(1, 4))
        c = Candidate(tuple(int(i) for i in rng.choice(num_layers, size=k, replace=False)))
        if c not in out:
            out.append(c)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--domain", default="translation")
    parser.add_argument("--limit", type=int, default=10, help="examples before the split (10: 2 calibration prompts)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--measurements", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cpus-per-trial", type=float, default=1)
    parser.add_argument("--local-threads", type=int, nargs="+", default=[0, 1],
                        help="torch threads of the local runs (0: torch's default); each is timed")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args(argv)

    import torch  # noqa: PLC0415

    from specsparse.data import get_domain  # noqa: PLC0415
    from specsparse.decoding.models import load_model_cached  # noqa: PLC0415
    from specsparse.measuring.evaluation import EvaluationSpec  # noqa: PLC0415
    from specsparse.study.runners.local import LocalRunner  # noqa: PLC0415
    from specsparse.study.runners.ray import RayRunner  # noqa: PLC0415
    from specsparse.types import GenerationConfig  # noqa: PLC0415

    spec = EvaluationSpec(model=args.model, domain=get_domain(args.domain, limit=args.limit),
                          generation=GenerationConfig(max_new_tokens=args.max_new_tokens))
    num_layers = load_model_cached(spec.model, spec.dtype, spec.device).num_layers
    batch = candidates(num_layers, args.measurements)

    local = LocalRunner(progress=False)
    local.call(spec, lambda evaluator: None)  # load outside the timing, as the Ray workers' load is reported apart
    default_threads = torch.get_num_threads()
    local_s: dict[str, float] = {}
    for threads in args.local_threads:
        torch.set_num_threads(threads or default_threads)
        start = time.perf_counter()
        local_results = local.evaluate_batch(spec, batch)
        local_s[f"local_{torch.get_num_threads()}_threads_s"] = round(time.perf_counter() - start, 2)
    torch.set_num_threads(default_threads)
    best_local = min(local_s.values())

    start = time.perf_counter()
    runner = RayRunner(num_workers=args.workers, cpus_per_trial=args.cpus_per_trial)
    try:
        first = time.perf_counter()
        ray_results = runner.evaluate_batch(spec, batch)
        first_batch_s = time.perf_counter() - first
        ray_total_s = time.perf_counter() - start
        second = time.perf_counter()
        runner.evaluate_batch(spec, batch)
        ray_batch_s = time.perf_counter() - second
    finally:
        runner.close()
    same = [(m.accept_length, m.metric) for m in local_results] == [(m.accept_length, m.metric) for m in ray_results]
    numbers = {
        "model": args.model,
        "measurements": len(batch),
        "workers": args.workers,
        "cpus": os.cpu_count(),
        **local_s,
        "ray_total_s": round(ray_total_s, 2),
        "ray_first_batch_s": round(first_batch_s, 2),
        "ray_batch_s": round(ray_batch_s, 2),
        "ratio_total_vs_best_local": round(ray_total_s / best_local, 3),
        "ratio_batch_vs_best_local": round(ray_batch_s / best_local, 3),
        "same_accept_and_metric": same,
    }
    print(json.dumps(numbers, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(numbers, f, indent=2)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
