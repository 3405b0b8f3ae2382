"""Probe: the matrix products of one forward of 1-8 rows, three ways, side by side in one process.

    python scripts/probe_row_products.py                 # SmolLM2-135M's shapes (30 layers + the LM head)
    python scripts/probe_row_products.py --rounds 15 --rows 1,2,4,6,8

- packed: oneDNN on weights in its blocked layout (`forward_path.PrepackedLinear`, what the fast path runs);
- plain: `F.linear` (MKL) on the weights as stored;
- blocked kernel: a row-product kernel written for few rows (below), on weights laid out [out/64][in][64]:
  for each input element, 64 outputs' weights (one cache line each 16) multiply the element broadcast
  over every row, so the weights stream once in order and no sum crosses vector lanes.

Not used by specsparse: it asks whether a kernel of our own should replace oneDNN's for the lean step's
one-token products (BENCHMARKS.md, "Native kernels between the products"). Random weights of the model's
shapes, float32; interleaved rounds, medians; GB/s = weight bytes read per second.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional

from specsparse.decoding.lean_kernels import compiled

BLOCK = 64
KERNEL = r"""
#include <cstring>
typedef float v16 __attribute__((vector_size(64)));
static inline v16 load(const float* p) { v16 v; std::memcpy(&v, p, 64); return v; }
template <int N>
static void block(const float* x, const float* w, int in, float* y, long out, long o) {
  v16 acc[N][4];
  for (int r = 0; r < N; ++r) for (int a = 0; a < 4; ++a) acc[r][a] = v16{};
  for (int i = 0; i < in; ++i) {
    const v16 w0 = load(w + i * 64L), w1 = load(w + i * 64L + 16), w2 = load(w + i * 64L + 32), w3 = load(w + i * 64L + 48);
    for (int r = 0; r < N; ++r) {
      const float xi = x[(long)r * in + i];
      acc[r][0] += w0 * xi; acc[r][1] += w1 * xi; acc[r][2] += w2 * xi; acc[r][3] += w3 * xi;
    }
  }
  for (int r = 0; r < N; ++r) std::memcpy(y + (long)r * out + o, acc[r], sizeof(acc[r]));
}
template <int N>
static void rows(const float* x, const float* w, long out, int in, float* y) {
#pragma omp parallel for schedule(static)
  for (long b = 0; b < out / 64; ++b) block<N>(x, w + b * in * 64, in, y, out, b * 64);
}
extern "C" void blocked_product(const float* x, int n, const float* w, long out, int in, float* y) {
  for (int r = 0; r < n; r += 6) {
    const float* xr = x + (long)r * in;
    float* yr = y + (long)r * out;
    switch (n - r < 6 ? n - r : 6) {
      case 1: rows<1>(xr, w, out, in, yr); break;
      case 2: rows<2>(xr, w, out, in, yr); break;
      case 3: rows<3>(xr, w, out, in, yr); break;
      case 4: rows<4>(xr, w, out, in, yr); break;
      case 5: rows<5>(xr, w, out, in, yr); break;
      default: rows<6>(xr, w, out, in, yr); break;
    }
  }
}
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--qkv", type=int, default=960, help="q/k/v outputs together")
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--rows", default="1,2,4,6,8")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "row_products.cpp"
        source.write_text(KERNEL)
        library, why_not = compiled(source)
    if library is None:
        raise SystemExit(f"the probe's kernel {why_not}")
    library.blocked_product.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_long, ctypes.c_int,
                                        ctypes.c_void_p)
    shapes = [(args.qkv, args.hidden), (args.hidden, args.hidden), (2 * args.intermediate, args.hidden),
              (args.hidden, args.intermediate)] * args.layers + [(args.vocab, args.hidden)]
    if any(out % BLOCK or inner % 16 for out, inner in shapes):
        raise SystemExit(f"every output count must divide by {BLOCK} and every input count by 16: {sorted(set(shapes))}")
    torch.manual_seed(0)
    plain = [torch.randn(out, inner) for out, inner in shapes]
    packed = [torch.ops.mkldnn._reorder_linear_weight(w) for w in plain]
    blocked = [w.reshape(w.shape[0] // BLOCK, BLOCK, w.shape[1]).transpose(1, 2).contiguous() for w in plain]
    weight_bytes = sum(w.numel() * 4 for w in plain)

    def run_blocked(inputs, outputs):
        for (out, inner), weight in zip(shapes, blocked):
            x, y = inputs[inner], outputs[out]
            library.blocked_product(x.data_ptr(), x.shape[0], weight.data_ptr(), out, inner, y.data_ptr())

    def run_packed(inputs, outputs):
        for (_, inner), weight in zip(shapes, packed):
            torch.ops.mkldnn._linear_pointwise(inputs[inner], weight, None, "none", [], "")

    def run_plain(inputs, outputs):
        for (_, inner), weight in zip(shapes, plain):
            functional.linear(inputs[inner], weight)

    methods = {"packed (oneDNN)": run_packed, "plain (F.linear)": run_plain, "blocked kernel": run_blocked}
    print(f"{len(shapes)} products, {weight_bytes / 1e6:.0f} MB of float32 weights, {torch.get_num_threads()} threads, "
          f"{args.rounds} interleaved rounds (medians)\n")
    print("| rows | " + " | ".join(f"{name} ms (GB/s)" for name in methods) + " | kernel max abs diff vs F.linear |")
    print("|---|" + "---|" * (len(methods) + 1))
    for n in map(int, args.rows.split(",")):
        inputs = {inner: torch.randn(n, inner) for _, inner in shapes}
        outputs = {out: torch.empty(n, out) for out, _ in shapes}
        run_blocked(inputs, outputs)
        difference = (outputs[args.vocab] - functional.linear(inputs[args.hidden], plain[-1])).abs().max().item()
        times: dict[str, list[float]] = {name: [] for name in methods}
        with torch.inference_mode():
            for round_ in range(args.rounds + 1):
                for name, method in (methods.items() if round_ % 2 else reversed(methods.items())):
                    start = time.perf_counter()
                    method(inputs, outputs)
                    if round_:
                        times[name].append(time.perf_counter() - start)
        medians = {name: statistics.median(samples) for name, samples in times.items()}
        print(f"| {n} | " + " | ".join(f"{1e3 * s:.1f} ({weight_bytes / s / 1e9:.1f})" for s in medians.values())
              + f" | {difference:.1e} |")


if __name__ == "__main__":
    main()
