"""A two-job sweep on a two-worker Ray cluster: its jobs one after another (Hydra's basic launcher) against
both at once (`hydra/launcher=ray`), side by side on the same cluster.

    python scripts/bench_parallel_jobs.py                         # SmolLM2-135M at small sizes, 2 rounds
    python scripts/bench_parallel_jobs.py --model tiny --rounds 1 --json bench_parallel.json

One local cluster (`ray start --head --num-cpus 2`) serves every run; each job measures on one worker
of one CPU (`runner=ray runner.num_workers=1`). The two variants run in ABBA order over `--rounds`
rounds, each run into a fresh outputs folder and results store (so no run is served by another's
measurements), and each round's ratio parallel / sequential is the wall time of the whole sweep command.
Both sweeps must write the same measurements (measurements.csv of every job).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from cluster_check import LocalCluster, show  # noqa: E402


def sweep(cluster: LocalCluster, model: str, outputs: Path, parallel: bool, env: dict[str, str]) -> float:
    """Wall seconds of the two-job sweep, its jobs at once (`parallel`) or one after the other."""
    sizes = ["domain.limit=10", "generation.max_new_tokens=32", "tss.max_depth=1", "timing_prompts=4"]
    command = [sys.executable, "run.py", "-m", "domain=qa,translation", "search=bfs", f"model={model}", "logger=none",
               "progress=false", "runner=ray", "runner.num_workers=1", f"runner.address={cluster.address}", *sizes,
               f"paths.outputs={outputs}", f"hydra.sweep.dir={outputs / 'multirun'}"]
    if parallel:
        command += ["hydra/launcher=ray", f"hydra.launcher.address={cluster.address}"]
    show(command)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"sweep failed: {done.stderr[-3000:]}")
    return seconds


def measurements(outputs: Path) -> dict[str, str]:
    return {p.parent.name: p.read_text() for p in sorted((outputs / "multirun").glob("*/measurements.csv"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2_135m", help="model group option")
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds (each: sequential and parallel once)")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="specsparse-parallel-"))
    token = secrets.token_hex(32)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    cluster = LocalCluster(Path(f"/tmp/ssray-{secrets.token_hex(3)}"), env, head_cpus=2)
    times: dict[str, list[float]] = {"sequential": [], "parallel": []}
    same = True
    try:
        cluster.start_head()
        run = 0
        for round_index in range(args.rounds):
            order = ["sequential", "parallel"] if round_index % 2 == 0 else ["parallel", "sequential"]
            outputs = {}
            for variant in order:
                outputs[variant] = work / f"{run}_{variant}"
                times[variant].append(sweep(cluster, args.model, outputs[variant], variant == "parallel", env))
                run += 1
                print(f"round {round_index}: {variant} {times[variant][-1]:.1f} s", flush=True)
            same = same and measurements(outputs["sequential"]) == measurements(outputs["parallel"]) != {}
    finally:
        cluster.stop()
    ratios = [p / s for p, s in zip(times["parallel"], times["sequential"])]
    numbers = {"model": args.model, "cpus": os.cpu_count(), "rounds": args.rounds,
               "sequential_s": [round(t, 1) for t in times["sequential"]],
               "parallel_s": [round(t, 1) for t in times["parallel"]],
               "ratio_parallel_over_sequential": [round(r, 3) for r in ratios],
               "median_ratio": round(statistics.median(ratios), 3), "same_measurements": same}
    print(json.dumps(numbers, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
