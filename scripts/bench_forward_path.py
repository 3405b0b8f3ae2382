"""Forward-path benchmark: what a k-token forward costs against a one-token forward, on the eager and on the
fast path (specsparse/decoding/forward_path.py), side by side in one process, and how far each is from
what the machine allows.

    python scripts/bench_forward_path.py                    # SmolLM2-135M, float32
    python scripts/bench_forward_path.py --model tiny --repeats 3 --output /tmp/fp.json

Both paths load the same weights. For each, forwards of k tokens (logits for all k, as a verification
needs) after a context of --context tokens are timed in interleaved rounds: every (path, k) cell once
per round, the order alternating, so drift hits every cell alike; each cell keeps its median. Speculation
pays when accept length exceeds r = t(k tokens) / t(1 token) of the path that runs.

The floor: a forward reads every weight once (the tied embedding/LM head counted once), at the memory
bandwidth a large read reaches on this machine (timed here, the median of a few sums over a buffer
far larger than the caches); its arithmetic (2 FLOPs per weight per token) is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from specsparse.decoding.models import load_model
from specsparse.decoding.session import ModelSession

CHUNKS = (1, 2, 4, 6, 8, 16)
PATHS = ("eager", "fast")


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights one forward reads (shared tensors once)."""
    seen, total = set(), 0
    for tensor in model.parameters():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def read_bandwidth(megabytes: int = 1024, repeats: int = 5) -> float:
    """Bytes per second a sum over a buffer of `megabytes` reads (a reachable ceiling for weight reads)."""
    buffer = torch.ones(megabytes * 2**20 // 4)
    buffer.sum()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.sum()
        times.append(time.perf_counter() - start)
    return buffer.numel() * 4 / statistics.median(times)


def time_forwards(sessions: dict[str, ModelSession], context: int, rounds: int) -> dict[tuple[str, int], float]:
    """Median seconds of each (path, k) cell over `rounds` interleaved rounds (one warm-up round dropped)."""
    cells = [(path, k) for path in sessions for k in CHUNKS]
    times: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
    tokens = list(range(100, 100 + max(CHUNKS)))
    with torch.inference_mode():
        for round_ in range(rounds + 1):
            for path, k in cells if round_ % 2 == 0 else reversed(cells):
                session = sessions[path]
                start = time.perf_counter()
                session.forward(tokens[:k])
                elapsed = time.perf_counter() - start
                session.rollback(context)
                if round_ > 0:
                    times[(path, k)].append(elapsed)
    return {cell: statistics.median(samples) for cell, samples in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help='any load_model source ("tiny": random test model)')
    parser.add_argument("--context", type=int, default=200, help="cached tokens before each timed forward")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved timing rounds")
    parser.add_argument("--bandwidth-mb", type=int, default=1024, help="buffer the read bandwidth is timed on")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--output", default="outputs/bench_forward_path.json")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = {path: load_model(args.model, dtype="float32", forward_path=path) for path in PATHS}
    vocab = loaded["eager"].model.config.vocab_size
    context = [(7 * i) % vocab for i in range(args.context)]
    sessions = {}
    for path, model in loaded.items():
        sessions[path] = ModelSession(model.model, ())
        with torch.inference_mode():
            sessions[path].prefill(context)
    load_start = os.getloadavg()
    medians = time_forwards(sessions, args.context, args.repeats)
    bandwidth = read_bandwidth(args.bandwidth_mb)
    weights = weight_bytes(loaded["eager"].model)
    floor_s = weights / bandwidth
    eager_one = medians[("eager", 1)]
    rows = []
    for path in PATHS:
        own_one = medians[(path, 1)]
        for k in CHUNKS:
            seconds = medians[(path, k)]
            rows.append({"path": path, "tokens": k, "median_ms": 1e3 * seconds, "over_own_one_token": seconds / own_one,
                         "over_eager_one_token": seconds / eager_one, "over_read_floor": seconds / floor_s,
                         "gflop": 2 * weights / 4 * k / 1e9})
    header = (f"model {args.model} (float32), context {args.context} tokens, {args.repeats} interleaved rounds (medians), "
              f"torch threads {torch.get_num_threads()}, load average {'/'.join(f'{x:.2f}' for x in load_start)} at start; "
              f"weights {weights / 1e6:.0f} MB, read bandwidth {bandwidth / 1e9:.1f} GB/s (a {args.bandwidth_mb} MB sum): "
              f"read floor {1e3 * floor_s:.1f} ms per forward")
    lines = [header, "", "| path | tokens | median ms | / own 1-token | / eager 1-token | / read floor | GFLOP |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['path']} | {r['tokens']} | {r['median_ms']:.1f} | {r['over_own_one_token']:.2f} | "
              f"{r['over_eager_one_token']:.2f} | {r['over_read_floor']:.2f} | {r['gflop']:.2f} |" for r in rows]
    text = "\n".join(lines)
    print(text)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"header": header, "args": vars(args), "rows": rows, "read_bandwidth": bandwidth,
                                  "weight_bytes": weights}, indent=2))
    output.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
