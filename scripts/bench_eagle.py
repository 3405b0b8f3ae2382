"""EAGLE benchmark: eagle chain, eagle tree, samd and pld against dense decoding on held-out prompts,
in one process, interleaved prompt by prompt (rotating order), for each dtype. Every output is checked
against the dense greedy output of the same dtype (lossless).

    python scripts/bench_eagle.py --head ~/.cache/specsparse/eagle/smollm2-135m
    python scripts/bench_eagle.py --head DIR --spec-bench ../shared/data/spec_bench/question.jsonl --dtypes float32,bfloat16
    python scripts/bench_eagle.py --head FULL --head TRAINED_AT_K --vocab-file ids.json   # the vocabulary paper

Held-out built-in prompts are the test splits (80%) of the built-in sets, less any prompt a head
was trained on (its training.json's trained_ids). Accept length is tokens per verification step, bonus included.
Speedups are ratios of total wall time, with 95% bootstrap intervals over prompts (paired).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from specsparse.data import BUILTIN_SETS, DOMAINS, build_messages, load_examples
from specsparse.data.split import split_examples
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.generation import encode_messages
from specsparse.decoding.models import load_model
from specsparse.drafters import PromptLookupDrafter, SuffixAutomatonDrafter, TokenRecyclingDrafter
from specsparse.drafters.eagle import EagleDrafter
from specsparse.drafters.eagle.checkpoint import trained_ids
from specsparse.types import GenerationConfig

SPEC_BENCH_DOMAINS = ("translation", "summarization", "qa", "math", "rag", "mt_bench")


def held_out_prompts(tokenizer, per_domain: int, spec_bench: str | None,
                     trained: set[str] = frozenset()) -> list[tuple[str, list[int]]]:
    """Up to `per_domain` prompts of each domain that no head was trained on (`trained`: example ids)."""
    prompts = []
    for name in BUILTIN_SETS:
        domain = DOMAINS[name]
        if spec_bench:
            if name not in SPEC_BENCH_DOMAINS:
                continue
            examples = load_examples(name, "spec_bench", spec_bench)[:per_domain]
        else:
            examples = [ex for ex in split_examples(load_examples(name, "builtin"))[1] if ex.id not in trained]
            examples = examples[:per_domain]
        prompts += [(name, encode_messages(tokenizer, build_messages(domain, ex, 0))) for ex in examples]
    return prompts


def bootstrap_ratio(numerator: np.ndarray, denominator: np.ndarray, draws: int = 2000) -> tuple[float, float]:
    """95% interval of sum(numerator) / sum(denominator), prompts resampled together."""
    rng = np.random.default_rng(0)
    index = rng.integers(0, len(numerator), (draws, len(numerator)))
    ratios = numerator[index].sum(1) / denominator[index].sum(1)
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def run(args, dtype: str) -> list[dict]:
    loaded = load_model(args.model, dtype=dtype, device=args.device)
    model = loaded.model
    vocab = model.config.vocab_size
    methods = {
        "dense": lambda: None,
        "pld": lambda: PromptLookupDrafter(),
        "samd": lambda: SuffixAutomatonDrafter(fallback=TokenRecyclingDrafter(vocab)),
    }
    trim = None if args.vocab_file is None else json.loads(Path(args.vocab_file).read_text())
    for path in args.head:
        head = EagleDrafter.from_target(loaded, path=path).head
        variants = [(f"eagle ({head.draft_vocab_size} tokens)", None)]
        if trim is not None and head.draft_vocab_size == vocab:  # a full head drafting through the file's rows
            variants.append((f"eagle ({vocab} tokens) through {len(trim)} rows", trim))
        for label, ids in variants:
            methods[f"{label} chain"] = lambda head=head, ids=ids: EagleDrafter(head, model, vocab_ids=ids)
            methods[f"{label} tree {args.tree[0]}x{args.tree[1]}"] = (
                lambda head=head, ids=ids: EagleDrafter(head, model, args.tree, vocab_ids=ids))
    trained = {i for path in args.head for i in trained_ids(path) or ()}
    prompts = held_out_prompts(loaded.tokenizer, args.per_domain, args.spec_bench, trained)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, num_draft_tokens=args.k)
    names = list(methods)
    times = {m: np.zeros(len(prompts)) for m in names}
    tokens = {m: np.zeros(len(prompts)) for m in names}
    steps = {m: np.zeros(len(prompts)) for m in names}
    mismatches = dict.fromkeys(names, 0)
    speculative_generate(model, prompts[0][1], None, config, eos_token_ids=loaded.eos_token_ids)  # warm-up
    for i, (_, prompt) in enumerate(prompts):
        outputs = {}
        for name in names[i % len(names):] + names[: i % len(names)]:
            start = time.perf_counter()
            result = speculative_generate(model, prompt, methods[name](), config, eos_token_ids=loaded.eos_token_ids)
            times[name][i] = time.perf_counter() - start
            tokens[name][i] = len(result.new_token_ids)
            steps[name][i] = len(result.accept_lengths)
            outputs[name] = result.new_token_ids
        for name in names:
            mismatches[name] += outputs[name] != outputs["dense"]
        print(f"[{dtype}] prompt {i + 1}/{len(prompts)}", file=sys.stderr, end="\r")
    rows = []
    for name in names:
        low, high = bootstrap_ratio(times["dense"], times[name])
        accept_low, accept_high = bootstrap_ratio(tokens[name], steps[name])
        rows.append({
            "dtype": dtype, "method": name, "prompts": len(prompts),
            "accept_length": float(tokens[name].sum() / steps[name].sum()),
            "accept_low": accept_low, "accept_high": accept_high,
            "tokens_per_s": float(tokens[name].sum() / times[name].sum()),
            "speedup": float(times["dense"].sum() / times[name].sum()), "speedup_low": low, "speedup_high": high,
            "mismatches": mismatches[name],
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", required=True, action="append",
                        help="EAGLE checkpoint directory (specsparse train-drafter); repeat to compare heads")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtypes", default="float32", help="comma-separated, e.g. float32,bfloat16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--spec-bench", default=None, help="Spec-Bench question.jsonl (default: held-out built-in prompts)")
    parser.add_argument("--per-domain", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--tree", type=int, nargs=2, default=(4, 16), metavar=("TOP_K", "TOTAL"))
    parser.add_argument("--vocab-file", default=None,
                        help="JSON list of token ids (a job's draft_vocab_ids): full-vocabulary heads also draft "
                             "through these rows of the LM head, untrained at that size")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    for head in args.head:
        if not (Path(head) / "config.json").is_file():
            sys.exit(f"--head {head}: no EAGLE checkpoint there (train one: specsparse train-drafter --output DIR)")
    torch.manual_seed(0)
    rows = [row for dtype in args.dtypes.split(",") for row in run(args, dtype)]
    source = "Spec-Bench" if args.spec_bench else "held-out built-in"
    print(f"\n{args.model}, {rows[0]['prompts']} {source} prompts, {args.max_new_tokens} new tokens, k={args.k}, "
          f"{torch.get_num_threads()} threads\n")
    print("| dtype | method | accept length [95% CI] | tok/s | speedup vs dense [95% CI] | outputs equal to dense |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['method']} | {r['accept_length']:.2f} [{r['accept_low']:.2f}-{r['accept_high']:.2f}] | "
              f"{r['tokens_per_s']:.1f} | "
              f"{r['speedup']:.2f}x [{r['speedup_low']:.2f}-{r['speedup_high']:.2f}] | "
              f"{r['prompts'] - r['mismatches']}/{r['prompts']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
