"""Forward-path benchmark: what a k-token forward costs against a one-token forward, on the eager path, on
the fast path through HF's modules and through the lean decode step (specsparse/decoding/forward_path.py,
lean_step.py), and in llama.cpp on the same weights, side by side, and how far each is from what the
machine allows.

    python scripts/bench_forward_path.py                    # SmolLM2-135M, float32
    python scripts/bench_forward_path.py --dtypes float32,bfloat16 \
        --llama-bench /path/to/llama-bench --gguf float32=smol-f32.gguf,bfloat16=smol-bf16.gguf
    python scripts/bench_forward_path.py --model tiny --repeats 3 --output /tmp/fp.json

All paths load the same weights. For each, forwards of k tokens (logits for all k, as a verification
needs) after a context of --context tokens are timed in interleaved rounds: every (path, k) cell once
per round, the order alternating, so drift hits every cell alike; each cell keeps its median. With
--llama-bench, each round also runs llama-bench once per dtype (`-p <chunks> -n 16 -d <context> -r 1`,
the GGUF given for that dtype; build it as DESIGN.md says): its k-token cells are prompt batches at that
depth (logits for the last token only, so a little cheaper than a verification), and its `tg` cell the
mean of 16 one-token decode steps. Speculation pays when accept length exceeds r = t(k tokens) /
t(1 token) of the path that runs.

The floor: a forward reads every weight once (the tied embedding/LM head counted once), at the memory
bandwidth a large read reaches on this machine (timed here, the median of a few sums over a buffer
far larger than the caches); its arithmetic (2 FLOPs per weight per token) is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from specsparse.decoding.lean_step import lean_step_of
from specsparse.decoding.models import load_model
from specsparse.decoding.session import ModelSession

CHUNKS = (1, 2, 4, 6, 8, 16)
LLAMA_CPP_DECODE_TOKENS = 16  # llama-bench's `tg` cell: this many one-token decode steps, timed as one mean


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


def llama_bench(binary: str, gguf: str, context: int, threads: int) -> dict[int, float]:
    """One llama-bench run: seconds of a k-token batch at depth `context` for each k of CHUNKS, and of a
    one-token decode step (key 0, the mean over LLAMA_CPP_DECODE_TOKENS steps)."""
    command = [binary, "-m", gguf, "-p", ",".join(map(str, CHUNKS)), "-n", str(LLAMA_CPP_DECODE_TOKENS),
               "-d", str(context), "-t", str(threads), "-r", "1", "-o", "json"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return {row["n_prompt"] or 0: row["avg_ns"] / 1e9 / (row["n_gen"] or 1) for row in json.loads(done.stdout)}


def time_forwards(sessions: dict[str, ModelSession], context: int, rounds: int,
                  llama_cpp: dict[str, tuple[str, str]], threads: int) -> dict[tuple[str, int], float]:
    """Median seconds of each (path, k) cell over `rounds` interleaved rounds (one warm-up round dropped).
    llama_cpp: {path name: (llama-bench binary, GGUF file)}, one llama-bench run per round each."""
    cells = [(path, k) for path in sessions for k in CHUNKS]
    times: dict[tuple[str, int], list[float]] = {}
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
                    times.setdefault((path, k), []).append(elapsed)
            for path, (binary, gguf) in llama_cpp.items():
                for k, seconds in llama_bench(binary, gguf, context, threads).items():
                    if round_ > 0:
                        times.setdefault((path, k), []).append(seconds)
    return {cell: statistics.median(samples) for cell, samples in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help='any load_model source ("tiny": random test model)')
    parser.add_argument("--dtypes", default="float32", help="comma-separated: float32, bfloat16")
    parser.add_argument("--context", type=int, default=200, help="cached tokens before each timed forward")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved timing rounds")
    parser.add_argument("--bandwidth-mb", type=int, default=1024, help="buffer the read bandwidth is timed on")
    parser.add_argument("--threads", type=int, default=None, help="torch and llama.cpp threads (default: torch's own)")
    parser.add_argument("--llama-bench", default=None, help="llama.cpp's llama-bench binary, timed beside ours")
    parser.add_argument("--gguf", default="", help="the same weights for llama-bench, per dtype: float32=FILE,...")
    parser.add_argument("--output", default="outputs/bench_forward_path.json")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    dtypes = args.dtypes.split(",")
    ggufs = dict(item.split("=", 1) for item in args.gguf.split(",") if item)
    if args.llama_bench and not all(dtype in ggufs and Path(ggufs[dtype]).is_file() for dtype in dtypes):
        raise SystemExit(f"--gguf must name an existing GGUF file for each of --dtypes {args.dtypes}: {args.gguf!r}")
    sessions: dict[str, ModelSession] = {}
    weights = {}
    for dtype in dtypes:
        loaded = {path: load_model(args.model, dtype=dtype, forward_path=path).model for path in ("eager", "fast")}
        weights[dtype] = weight_bytes(loaded["eager"])
        vocab = loaded["eager"].config.vocab_size
        context = [(7 * i) % vocab for i in range(args.context)]
        sessions[f"{dtype} eager"] = ModelSession(loaded["eager"], ())
        sessions[f"{dtype} fast, HF modules"] = ModelSession(loaded["fast"], ())
        sessions[f"{dtype} fast, HF modules"].lean = None
        lean = lean_step_of(loaded["fast"])
        if lean is not None:
            sessions[f"{dtype} fast, lean step"] = ModelSession(loaded["fast"], ())
            if lean.kernels is not None:
                sessions[f"{dtype} fast, lean step, PyTorch calls"] = ModelSession(loaded["fast"], ())
                sessions[f"{dtype} fast, lean step, PyTorch calls"].lean = lean.on_pytorch_calls()
        with torch.inference_mode():
            for session in sessions.values():
                if session.length == 0:
                    session.prefill(context)
    llama_cpp = {f"{dtype} llama.cpp": (args.llama_bench, ggufs[dtype]) for dtype in dtypes if args.llama_bench}
    load_start = os.getloadavg()
    medians = time_forwards(sessions, args.context, args.repeats, llama_cpp, threads)
    bandwidth = read_bandwidth(args.bandwidth_mb)
    rows = []
    for path in [*sessions, *llama_cpp]:
        dtype = path.split(" ", 1)[0]
        floor_s = weights[dtype] / bandwidth
        own_one = medians[(path, 1)]
        for k in ([0] if path in llama_cpp else []) + list(CHUNKS):
            seconds = medians[(path, k)]
            rows.append({"path": path, "tokens": k or "1 (tg)", "median_ms": 1e3 * seconds,
                         "over_own_one_token": seconds / own_one,
                         "over_eager_one_token": seconds / medians[(f"{dtype} eager", 1)],
                         "over_read_floor": seconds / floor_s,
                         "gflop": 2 * weights[dtype] / torch.finfo(getattr(torch, dtype)).bits * 8 * max(k, 1) / 1e9})
    header = (f"model {args.model}, context {args.context} tokens, {args.repeats} interleaved rounds (medians), "
              f"threads {threads}, load average {'/'.join(f'{x:.2f}' for x in load_start)} at start; weights "
              + ", ".join(f"{dtype} {size / 1e6:.0f} MB" for dtype, size in weights.items())
              + f"; read bandwidth {bandwidth / 1e9:.1f} GB/s (a {args.bandwidth_mb} MB sum): read floor "
              + ", ".join(f"{dtype} {1e3 * size / bandwidth:.1f} ms" for dtype, size in weights.items())
              + " per forward")
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
