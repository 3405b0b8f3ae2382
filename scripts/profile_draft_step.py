"""Where an EAGLE chain draft step's time goes: the head's matrix products against everything else
(Python, dispatch, small ops), at the full vocabulary and at trimmed ones, beside one target forward.

    python scripts/profile_draft_step.py                       # SmolLM2-135M, EAGLE-1 layout, k = 4
    python scripts/profile_draft_step.py --arch eagle3 --vocab-sizes full,3097,12288

The head has random weights of the trained shape (time does not depend on the values). Per vocabulary:
the median wall time of `propose(k)` over repeats, and the share of it spent in matrix products
(aten::mm/addmm self time under torch.profiler, per propose). The rest bounds what removing per-node
Python overhead (a compiled or fused draft step) could save.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from specsparse.decoding.models import load_model
from specsparse.decoding.session import ModelSession
from specsparse.drafters.eagle import EagleDrafter
from specsparse.drafters.eagle.head import EagleHead, eagle3_feature_layers, head_config

MATRIX_PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm"}


def median_ms(step, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--arch", choices=("eagle", "eagle3"), default="eagle")
    parser.add_argument("--vocab-sizes", default="full,3097", help="comma-separated: full or a number of rows")
    parser.add_argument("--k", type=int, default=4, help="draft tokens per step")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = load_model(args.model).model
    layers = eagle3_feature_layers(model.config.num_hidden_layers) if args.arch == "eagle3" else None
    head = EagleHead(head_config(model.config), args.arch, **({"feature_layers": layers} if layers else {})).eval()
    prompt = [int(i) % model.config.vocab_size for i in range(1000, 1000 + args.prompt_tokens)]
    with torch.inference_mode():
        session = ModelSession(model, (), head.feature_layers)
        session.hidden_states(prompt)
        forward_ms = median_ms(lambda: model(torch.tensor([prompt[:1]])), args.repeats)
    print(f"{args.model}: one-token target forward {forward_ms:.1f} ms ({args.threads} threads)")
    rows = []
    for size in args.vocab_sizes.split(","):
        vocab_ids = None if size == "full" else list(range(int(size)))
        drafter = EagleDrafter(head, model, vocab_ids=vocab_ids)
        drafter.begin(prompt)
        drafter.observe_features(session.features[: len(prompt) - 1])
        step = functools.partial(drafter.propose, args.k)  # the head cache is cropped back each call
        step()
        wall = median_ms(step, args.repeats)
        with torch.profiler.profile() as profile:
            for _ in range(args.repeats):
                step()
        products = sum(e.self_cpu_time_total for e in profile.key_averages() if e.key in MATRIX_PRODUCTS)
        products_ms = products / 1e3 / args.repeats
        rows.append({"vocab": drafter.vocab_size, "k": args.k, "propose_ms": wall, "matrix_products_ms": products_ms,
                     "other_share": max(0.0, 1 - products_ms / wall), "forward_ms": forward_ms})
        print(f"vocab {drafter.vocab_size:>6}: propose({args.k}) {wall:6.2f} ms = {wall / forward_ms:.3f} target "
              f"forwards; matrix products {products_ms:6.2f} ms, everything else {rows[-1]['other_share']:.0%}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=2)


if __name__ == "__main__":
    main()
