"""Dense accept length and task metric per domain and drafter (the baseline every search starts from).

    python scripts/domain_baselines.py                                     # built-in sets, calibration split
    python scripts/domain_baselines.py --source spec_bench --path ../shared/data/spec_bench/question.jsonl \
        --domains translation,summarization,rag --limit 16 --split all

Measurements go through the results store, so a rerun prints from the store at once.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from specsparse.data import get_domain
from specsparse.drafters import DRAFTERS
from specsparse.measuring.evaluation import EvaluationSpec
from specsparse.study.runners.local import LocalRunner
from specsparse.study.store import ResultsStore
from specsparse.study.study import Study
from specsparse.types import Candidate, Component, GenerationConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--domains", default="translation,summarization,qa,math,rag,mt_bench,mmlu")
    parser.add_argument("--drafters", default="pld,samd")
    parser.add_argument("--source", default="builtin")
    parser.add_argument("--path", default=None)
    parser.add_argument("--limit", type=int, default=None, help="first n examples of the source")
    parser.add_argument("--split", default="calibration", choices=["calibration", "test", "all"],
                        help="'all' measures every (first --limit) example, unsplit")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--store", default="outputs/store.sqlite")
    args = parser.parse_args()

    Path(args.store).parent.mkdir(parents=True, exist_ok=True)
    store = ResultsStore(args.store)
    print("| domain | source | drafter | prompts | accept length | metric (0-100) | modeled tokens/s | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for domain in args.domains.split(","):
        for drafter in args.drafters.split(","):
            spec = EvaluationSpec(
                model=args.model,
                drafter=Component(DRAFTERS[drafter]),
                domain=get_domain(domain, source=args.source, path=args.path, limit=args.limit),
                generation=GenerationConfig(max_new_tokens=args.max_new_tokens, num_draft_tokens=5),
            )
            start = time.perf_counter()
            (m,) = Study(spec, LocalRunner(progress=False), store).measure([Candidate()], args.split)
            seconds = time.perf_counter() - start
            metric = "n/a" if m.metric is None else f"{100 * m.metric:.1f}"
            print(f"| {domain} | {args.source} | {drafter} | {len(m.per_prompt)} | {m.accept_length:.3f} | {metric} "
                  f"| {m.modeled_tokens_per_s:.1f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
