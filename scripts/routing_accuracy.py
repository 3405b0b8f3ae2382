"""Routing accuracy and per-request cost of the domain routers, on held-out prompts.

    python scripts/routing_accuracy.py [--spec-bench ../shared/data/spec_bench/question.jsonl] [--hidden]

Routers are fitted on the built-in calibration prompts, and (with --spec-bench) also as the runtime
fits them from a config map made on Spec-Bench: on the Spec-Bench calibration split (20%) of the
categories that map to a built-in domain, plus the built-in calibration prompts of the other
domains. They are scored on the built-in test split and on the Spec-Bench test split (80%).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from specsparse.data import load_examples, split_examples
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
    fits = {"built-in calibration": builtin_prompts("calibration")}
    if args.spec_bench:
        splits = {d: split_examples(load_examples(d, "spec_bench", args.spec_bench)) for d in SPEC_BENCH_DOMAINS}
        sets["Spec-Bench test split"] = {d: ["\n\n".join(ex.turns) for ex in test] for d, (_, test) in splits.items()}
        fits["Spec-Bench calibration (a map's prompts)"] = {
            **builtin_prompts("calibration"), **{d: ["\n\n".join(ex.turns) for ex in cal] for d, (cal, _) in splits.items()}}
    kinds = ["tfidf"] + (["hidden"] if args.hidden else [])
    target = None
    if args.hidden:
        from specsparse.decoding.models import load_model  # noqa: PLC0415

        target = load_model("smollm2-135m")
    print("| router | fitted on | scored on | n | accuracy | ms / request (median) | most common confusion |")
    print("|---|---|---|---|---|---|---|")
    for kind in kinds:
        for fit_name, fit_prompts in fits.items():
            router = make_router(kind, target).fit(fit_prompts)
            for name, prompts in sets.items():
                accuracy, ms, confusions = score(router, prompts)
                n = sum(len(p) for p in prompts.values())
                worst = ", ".join(f"{a}->{b} x{c}" for (a, b), c in confusions.most_common(2)) or "-"
                print(f"| {kind} | {fit_name} | {name} | {n} | {accuracy:.1%} | {ms:.2f} | {worst} |")


if __name__ == "__main__":
    main()
