"""Accept length of the SAM-Decoding and Token Recycling variants, side by side in one process.

    python scripts/bench_drafters.py                                         # built-in sets
    python scripts/bench_drafters.py --source spec_bench --path ../shared/data/spec_bench/question.jsonl

Per domain: each variant measured on the test split (a warm table learns from the built-in sets'
references without this domain's calibration and test examples, as in a job), its accept length with a 95% interval over prompts, the paired ratio to the first variant with
its interval, and whether every reply equals plain greedy decoding. Dense target, float32.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from specsparse.data import get_domain
from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
from specsparse.measuring.intervals import accept_interval, paired_ratios
from specsparse.types import Candidate, Component, GenerationConfig

SAMD = "specsparse.drafters.samd.SuffixAutomatonDrafter"
RECYCLING = "specsparse.drafters.recycling.TokenRecyclingDrafter"
# (label, drafter class, options); the first is the reference of the paired ratios.
VARIANTS = [
    ("samd, context only", SAMD, {"recycling_fallback": False}),
    ("samd + corpus", SAMD, {"recycling_fallback": False, "corpus": ["builtin"]}),
    ("samd + TR chain, fresh table", SAMD, {}),
    ("samd + TR chain, warm table", SAMD, {"recycling_warm_start": True}),
    ("samd + corpus + TR tree, warm (samd_paper)", SAMD,
     {"corpus": ["builtin"], "recycling_warm_start": True, "recycling_tree": [4, 3, 2]}),
    ("TR chain, fresh table", RECYCLING, {}),
    ("TR chain, warm table", RECYCLING, {"warm_start": True}),
    ("TR tree [4,3,2], warm table", RECYCLING, {"warm_start": True, "tree": [4, 3, 2]}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--domains", default="translation,summarization,qa,math,rag,mt_bench")
    parser.add_argument("--source", default="builtin")
    parser.add_argument("--path", default=None)
    parser.add_argument("--limit", type=int, default=40, help="first n examples per domain (20%% calibration)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--variants", default=None, help="comma-separated indices into VARIANTS (default: all)")
    args = parser.parse_args()
    variants = VARIANTS if args.variants is None else [VARIANTS[int(i)] for i in args.variants.split(",")]
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, num_draft_tokens=5)

    def measured(domain: str, drafter: Component, generation: GenerationConfig):
        spec = EvaluationSpec(model=args.model, drafter=drafter, split="test", generation=generation,
                              domain=get_domain(domain, source=args.source, path=args.path, limit=args.limit))
        return Evaluator(spec).evaluate_many([Candidate()], progress=False)[0]

    print("| domain | drafter | prompts | accept length [95% CI] | vs first [95% CI] | replies = greedy | s |")
    print("|---|---|---|---|---|---|---|")
    for domain in args.domains.split(","):
        plain = measured(domain, Component(SAMD, {"recycling_fallback": False}), GenerationConfig(
            max_new_tokens=args.max_new_tokens, num_draft_tokens=0))
        first = None
        for label, target, options in variants:
            start = time.perf_counter()
            m = measured(domain, Component(target, options), config)
            seconds = time.perf_counter() - start
            first = first or m
            ratio = paired_ratios(first, m).accept
            same = [p.output_text for p in m.per_prompt] == [p.output_text for p in plain.per_prompt]
            print(f"| {domain} | {label} | {len(m.per_prompt)} | {accept_interval(m)} | {ratio} | "
                  f"{'yes' if same else 'NO'} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
