"""Engine benchmark: our speculative engine vs HF transformers `generate`, in one run, same model,
prompts and dtype. Writes a Markdown table (BENCHMARKS.md section) and a JSON file.

    python scripts/bench_engine.py                                   # built-in prompts
    python scripts/bench_engine.py --spec-bench ../shared/data/spec_bench/question.jsonl

Every method runs every prompt once per repeat, interleaved prompt by prompt (in alternating order), so
machine noise hits them alike; tokens/s is total new tokens / total wall time per repeat, median over repeats.
Ratios also get a 95% paired bootstrap interval over prompts (tokens and wall time pooled over repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from specsparse.data import build_messages, get_domain, load_examples
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.generation import encode_messages
from specsparse.decoding.models import load_model
from specsparse.drafters import (
    PromptLookupDrafter,
    SelfSkipDrafter,
    SuffixAutomatonDrafter,
    TokenRecyclingDrafter,
)
from specsparse.types import GenerationConfig


def load_prompts(loaded, spec_bench: str | None, per_domain: int) -> list[tuple[str, list[int]]]:
    prompts = []
    for name in ("summarization", "translation"):
        domain = get_domain(name)
        if spec_bench:
            examples = load_examples(name, "spec_bench", spec_bench, limit=per_domain)
        else:
            examples = load_examples(name, limit=per_domain)
        for example in examples:
            prompts.append((name, encode_messages(loaded.tokenizer, build_messages(domain, example, 0))))
    return prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--spec-bench", default=None, help="path to Spec-Bench question.jsonl (default: built-in sets)")
    parser.add_argument("--per-domain", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--k", type=int, default=5, help="draft tokens per step (the cap, for adaptive drafting)")
    parser.add_argument("--verify-cost-per-token", type=float, default=GenerationConfig.verify_cost_per_token,
                        help="the adaptive draft length's cost of one more verified token")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", default="8,12,16,20", help="4-layer skip set for the sparse target")
    parser.add_argument("--self-skip", default="6-23", help="draft skip set of the self_skip drafter (a-b range)")
    parser.add_argument("--skip-methods", default="", help="comma-separated methods to leave out (e.g. ours_self_skip)")
    parser.add_argument("--output", default="outputs/bench_engine.json")
    args = parser.parse_args()

    torch.manual_seed(0)
    loaded = load_model(args.model, dtype=args.dtype)
    model, eos = loaded.model, loaded.eos_token_ids
    prompts = load_prompts(loaded, args.spec_bench, args.per_domain)
    skip = tuple(int(i) for i in args.skip.split(",") if i)
    lo, hi = (int(x) for x in args.self_skip.split("-"))
    vocab = model.config.vocab_size
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, num_draft_tokens=args.k)
    adaptive = replace(config, draft_length="adaptive", verify_cost_per_token=args.verify_cost_per_token)

    def ours(drafter_factory, skip_layers=(), config=config):
        def run(ids):
            drafter = drafter_factory() if drafter_factory else None
            r = speculative_generate(model, ids, drafter, config, skip_layers, eos)
            forwards_time = r.prefill_time_s + r.verify_time_s
            return list(r.new_token_ids), r.wall_time_s, r.accept_lengths, forwards_time
        return run

    def hf(**kwargs):
        def run(ids):
            inputs = torch.tensor([ids])
            start = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=args.max_new_tokens,
                                     do_sample=False, eos_token_id=list(eos), pad_token_id=eos[0], **kwargs)
            wall = time.perf_counter() - start
            return out[0, len(ids):].tolist(), wall, None, None
        return run

    methods = {
        "hf_greedy": hf(),
        "ours_dense": ours(None),
        "hf_prompt_lookup": hf(prompt_lookup_num_tokens=args.k, max_matching_ngram_size=3),
        "ours_pld": ours(lambda: PromptLookupDrafter(max_ngram_size=3)),
        "ours_pld_adaptive": ours(lambda: PromptLookupDrafter(max_ngram_size=3), config=adaptive),
        "ours_samd": ours(lambda: SuffixAutomatonDrafter(min_match=2, fallback=TokenRecyclingDrafter(vocab))),
        "ours_samd_adaptive": ours(lambda: SuffixAutomatonDrafter(min_match=2, fallback=TokenRecyclingDrafter(vocab)),
                                   config=adaptive),
        "ours_recycling": ours(lambda: TokenRecyclingDrafter(vocab)),
        "ours_pld_tree": ours(lambda: PromptLookupDrafter(max_ngram_size=3, branches=2)),
        "ours_recycling_tree": ours(lambda: TokenRecyclingDrafter(vocab, tree=(2,))),
        "ours_samd_tree": ours(lambda: SuffixAutomatonDrafter(min_match=2, fallback=TokenRecyclingDrafter(vocab, tree=(2,)))),
        "ours_self_skip": ours(lambda: SelfSkipDrafter(model, skip_layers=range(lo, hi + 1))),
        f"ours_dense_skip{len(skip)}": ours(None, skip),
        f"ours_samd_skip{len(skip)}": ours(lambda: SuffixAutomatonDrafter(min_match=2, fallback=TokenRecyclingDrafter(vocab)), skip),
    }
    for name in filter(None, args.skip_methods.split(",")):
        methods.pop(name)
    for _, ids in prompts[:1]:  # warm-up
        for run in methods.values():
            run(ids)
    per_repeat = {name: [] for name in methods}
    # Per prompt, over all repeats: new tokens and wall seconds (the paired bootstrap over prompts).
    prompt_tokens = {name: np.zeros(len(prompts)) for name in methods}
    prompt_wall = {name: np.zeros(len(prompts)) for name in methods}
    outputs: dict[str, list[list[int]]] = {name: [] for name in methods}
    accepts: dict[str, list[int]] = {name: [] for name in methods}
    overhead: list[float] = []
    for repeat in range(args.repeats):
        tokens = dict.fromkeys(methods, 0)
        wall = dict.fromkeys(methods, 0.0)
        forwards = 0.0
        for i, (_, ids) in enumerate(prompts):
            order = list(methods) if (i + repeat) % 2 == 0 else list(reversed(methods))  # ABBA: drift hits all alike
            for name in order:
                out, seconds, accept_lengths, forwards_time = methods[name](ids)
                tokens[name] += len(out)
                wall[name] += seconds
                prompt_tokens[name][i] += len(out)
                prompt_wall[name][i] += seconds
                if repeat == 0:
                    outputs[name].append(out)
                    if accept_lengths is not None:
                        accepts[name].extend(accept_lengths)
                if name == "ours_dense":
                    forwards += forwards_time
        for name in methods:
            per_repeat[name].append(tokens[name] / wall[name])
        overhead.append(wall["ours_dense"] / forwards)
        print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)

    def tok_s(name):
        return statistics.median(per_repeat[name])

    def ratio(name, over):
        """Tokens/s ratio: median over repeats, its range over repeats, and a 95% paired bootstrap
        interval over prompts (all repeats pooled) (None: a method left out)."""
        if name not in per_repeat or over not in per_repeat:
            return None
        per = [a / b for a, b in zip(per_repeat[name], per_repeat[over], strict=True)]
        draws = np.random.default_rng(0).integers(0, len(prompts), (2000, len(prompts)))
        rate = lambda m: prompt_tokens[m][draws].sum(1) / prompt_wall[m][draws].sum(1)  # noqa: E731
        low, high = np.percentile(rate(name) / rate(over), [2.5, 97.5])
        return [statistics.median(per), min(per), max(per), float(low), float(high)]

    rows = []
    for name in methods:
        row = {
            "method": name,
            "tokens_per_s": tok_s(name),
            "accept_length": (sum(accepts[name]) / len(accepts[name])) if accepts[name] else None,
            "target_forwards": len(accepts[name]) if accepts[name] else None,
            "new_tokens": sum(len(o) for o in outputs[name]),
        }
        rows.append(row)
    ratios = {
        "ours_dense / hf_greedy": ratio("ours_dense", "hf_greedy"),
        "ours_pld / hf_prompt_lookup": ratio("ours_pld", "hf_prompt_lookup"),
        "ours_pld_adaptive / hf_prompt_lookup": ratio("ours_pld_adaptive", "hf_prompt_lookup"),
        "ours_pld_adaptive / ours_pld": ratio("ours_pld_adaptive", "ours_pld"),
        "ours_samd / hf_greedy": ratio("ours_samd", "hf_greedy"),
        "ours_pld_tree / ours_pld": ratio("ours_pld_tree", "ours_pld"),
        "ours_recycling_tree / ours_recycling": ratio("ours_recycling_tree", "ours_recycling"),
        "ours_samd_tree / ours_samd": ratio("ours_samd_tree", "ours_samd"),
        "ours_samd_adaptive / hf_prompt_lookup": ratio("ours_samd_adaptive", "hf_prompt_lookup"),
        f"ours_dense_skip{len(skip)} / ours_dense": ratio(f"ours_dense_skip{len(skip)}", "ours_dense"),
        "engine wall / model forwards (dense)": [statistics.median(overhead), min(overhead), max(overhead), None, None],
    }
    ratios = {k: v for k, v in ratios.items() if v is not None}
    identical = {
        "ours_dense == hf_greedy": outputs["ours_dense"] == outputs["hf_greedy"],
        "ours_pld == hf_prompt_lookup": outputs["ours_pld"] == outputs["hf_prompt_lookup"],
        "ours_pld_adaptive == hf_prompt_lookup": outputs["ours_pld_adaptive"] == outputs["hf_prompt_lookup"],
        "all our dense-target drafters == ours_dense": all(
            outputs[n] == outputs["ours_dense"]
            for n in ("ours_pld", "ours_pld_adaptive", "ours_samd", "ours_samd_adaptive", "ours_recycling",
                      "ours_pld_tree", "ours_recycling_tree", "ours_samd_tree", "ours_self_skip") if n in outputs
        ),
        f"ours_samd_skip{len(skip)} == ours_dense_skip{len(skip)}": outputs[f"ours_samd_skip{len(skip)}"] == outputs[f"ours_dense_skip{len(skip)}"],
    }
    source = f"Spec-Bench ({args.spec_bench})" if args.spec_bench else "built-in sets"
    header = (
        f"model {args.model} ({args.dtype}), {len(prompts)} prompts (summarization + translation, {source}), "
        f"max_new_tokens {args.max_new_tokens}, k {args.k}, median of {args.repeats} repeats, "
        f"torch threads {torch.get_num_threads()}, skip set {list(skip)}, self_skip draft skip {lo}-{hi}"
    )
    lines = [header, "", "| method | tokens/s | accept length | target forwards | new tokens |", "|---|---|---|---|---|"]
    for row in rows:
        accept = f"{row['accept_length']:.2f}" if row["accept_length"] is not None else "-"
        forwards = row["target_forwards"] if row["target_forwards"] is not None else "-"
        lines.append(f"| {row['method']} | {row['tokens_per_s']:.1f} | {accept} | {forwards} | {row['new_tokens']} |")
    lines += ["", "| ratio | median over repeats | range over repeats | 95% CI over prompts |", "|---|---|---|---|"]
    lines += [f"| {k} | {v[0]:.3f} | {v[1]:.3f}-{v[2]:.3f} | " + ("-" if v[3] is None else f"{v[3]:.3f}-{v[4]:.3f}") + " |"
              for k, v in ratios.items()]
    lines += ["", "| identical output | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in identical.items()]
    print("\n".join(lines))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"header": header, "rows": rows, "ratios": ratios, "identical": identical}, indent=2))


if __name__ == "__main__":
    main()
