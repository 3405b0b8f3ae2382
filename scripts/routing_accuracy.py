"""Routing accuracy and per-request cost of the domain routers, on held-out prompts.

    python scripts/routing_accuracy.py [--spec-bench ../shared/data/spec_bench/question.jsonl] [--hidden]

Routers are fitted on the built-in calibration prompts; they are scored on the built-in test split
and, when given, on the Spec-Bench categories that map to a built-in domain.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from specsparse.data import load_examples
from specsparse.serving.router import builtin_prompts, make_router

SPEC_BENCH_DOMAINS = ("translation", "summarization", "qa", "math", "rag")


def score(router, prompts_by_domain) -> tuple[float, float, Counter]:
    right, total, times, confusions = 0, 0, [], Counter()
    for domain, prompts in prompts_by_domain.items():
        for prompt in prompts:
            start = time.perf_counter()
            predicted, _ = router.predict(prompt)
            times.append(1000 * (time.perf_counter() - start))
            right += predicted == domain
            total += 1
            if predicted != domain:
                confusions[(domain, predicted)] += 1
    return right / total, statistics.median(times), confusions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec-bench", default=None)
    parser.add_argument("--hidden", action="store_true", help="also the hidden-state router (loads SmolLM2)")
    args = parser.parse_args()
    sets = {"built-in test split": builtin_prompts("test")}
    if args.spec_bench:
        sets["Spec-Bench"] = {
            d: ["\n\n".join(ex.turns) for ex in load_examples(d, "spec_bench", args.spec_bench)]
            for d in SPEC_BENCH_DOMAINS
        }
    kinds = ["tfidf"] + (["hidden"] if args.hidden else [])
    target = None
    if args.hidden:
        from specsparse.decoding.models import load_model  # noqa: PLC0415

        target = load_model("smollm2-135m")
    print("| router | prompts | n | accuracy | ms / request (median) | most common confusion |")
    print("|---|---|---|---|---|---|")
    for kind in kinds:
        router = make_router(kind, target).fit(builtin_prompts("calibration"))
        for name, prompts in sets.items():
            accuracy, ms, confusions = score(router, prompts)
            n = sum(len(p) for p in prompts.values())
            worst = ", ".join(f"{a}->{b} x{c}" for (a, b), c in confusions.most_common(2)) or "-"
            print(f"| {kind} | {name} | {n} | {accuracy:.1%} | {ms:.2f} | {worst} |")


if __name__ == "__main__":
    main()
