"""Measurement benchmark: batched replay against the engine prompt by prompt, in one run, and the cost
profile's prediction against the engine's measured ms/token. Writes JSON next to --out.

    python scripts/bench_measure.py                     # 32 built-in prompts, 64 tokens, 10 skip sets
    python scripts/bench_measure.py --prompts 16 --max-new-tokens 48 --skip-sets 4

Part 1: every (skip set, drafter) is measured both ways on the same prompts: `measure.mode=engine`
(one prompt at a time) and replay (`measure_many`, every configuration batched together); accept
length, metric and per-prompt outputs must be identical, and the wall times are compared.
Part 2: for 3 skip sets x 2 drafters, the engine's decode ms/token (wall minus prefill, timed here;
the median of interleaved repeats) against the cost profile's modeled ms/token of the same runs' step
counts (the profile models decoding; prefill is left out of both).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from specsparse.data import build_messages, get_domain, load_examples
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.generation import encode_messages
from specsparse.decoding.models import load_model
from specsparse.decoding.session import ModelSession
from specsparse.drafters import PromptLookupDrafter, SuffixAutomatonDrafter
from specsparse.measuring.measure import count_chunks, measure, measure_many
from specsparse.measuring.pricing import draft_cost, price
from specsparse.measuring.profile import profile_for
from specsparse.types import GenerationConfig, Measurement

SKIP_SETS = [(), (3,), (9,), (15,), (27,), (5, 9), (10, 17), (3, 7, 10), (0, 7, 15, 29), (8, 12, 16, 20)]


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def first_divergence(target, prompt: list[int], skip, engine_text: str, replay_text: str) -> dict:
    """Where two outputs of one (prompt, skip set) part, and the sparse target's top-2 logit gap there,
    from a single-sequence teacher-forced forward over the common prefix (outputs re-tokenised)."""
    a = target.tokenizer.encode(engine_text, add_special_tokens=False)
    b = target.tokenizer.encode(replay_text, add_special_tokens=False)
    common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    session = ModelSession(target.model, tuple(skip))
    with torch.inference_mode():
        logits = session.forward(prompt + a[:common])[-1].float()
    top = torch.topk(logits, 2)
    chosen = {"engine": a[common] if common < len(a) else None, "replay": b[common] if common < len(b) else None}
    return {"token_index": common, "top2_gap": float(top.values[0] - top.values[1]),
            "top2": top.indices.tolist(), "chosen": chosen,
            "chosen_gap": (float(logits[chosen["engine"]] - logits[chosen["replay"]])
                           if None not in chosen.values() else None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=32, help="built-in prompts, half translation, half summarization")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--skip-sets", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64, help="rows per batched pass (64: the automatic size on CPU)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--drafters", default="pld,samd", help="comma-separated subset of pld,samd")
    parser.add_argument("--profile-only", action="store_true", help="run part 2 only")
    parser.add_argument("--profile-repeats", type=int, default=3, help="interleaved repeats of part 2 (0: part 1 only)")
    parser.add_argument("--out", default="outputs/bench_measure.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_model(args.model, dtype="float32")
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, num_draft_tokens=args.k)
    examples = load_examples("translation", limit=args.prompts // 2) + load_examples("summarization", limit=args.prompts - args.prompts // 2)
    drafters = {"pld": PromptLookupDrafter, "samd": lambda: SuffixAutomatonDrafter.from_target(target)}
    skips = SKIP_SETS[: args.skip_sets]
    report: dict = {"model": args.model, "prompts": len(examples), "max_new_tokens": args.max_new_tokens,
                    "k": args.k, "skip_sets": [list(s) for s in skips], "threads": args.threads, "drafters": {}}
    groups = {name: [ex for ex in examples if ex.domain == name] for name in ("translation", "summarization")}
    prompts_by_domain = {d: [encode_messages(target.tokenizer, build_messages(get_domain(d), ex, 0)) for ex in exs]
                         for d, exs in groups.items()}
    unknown = set(args.drafters.split(",")) - set(drafters)
    if unknown:
        parser.error(f"--drafters: unknown {sorted(unknown)}; choose from {sorted(drafters)}")
    chosen = {} if args.profile_only else {n: drafters[n] for n in args.drafters.split(",")}
    for name, make in chosen.items():
        start = time.perf_counter()
        engine = {s: [measure(target, get_domain(d), exs, make, s, config, mode="engine", progress=False)
                      for d, exs in groups.items()] for s in skips}
        engine_s = time.perf_counter() - start
        engine_rss = peak_rss_mb()
        start = time.perf_counter()
        batched = {}
        for d, exs in groups.items():
            for s, m in zip(skips, measure_many(target, get_domain(d), exs, [(s, make) for s in skips], config,
                                                batch_size=args.batch_size, progress=True)):
                batched.setdefault(s, []).append(m)
        replay_s = time.perf_counter() - start
        differing = []
        for s in skips:
            for d, m_engine, m_replay in zip(groups, engine[s], batched[s]):
                for prompt, p, q in zip(prompts_by_domain[d], m_engine.per_prompt, m_replay.per_prompt):
                    if (p.output_text, p.accept_lengths) == (q.output_text, q.accept_lengths):
                        continue
                    row = {"skip": list(s), "example": p.example_id, "same_output": p.output_text == q.output_text}
                    if not row["same_output"]:
                        row |= first_divergence(target, prompt, s, p.output_text, q.output_text)
                    differing.append(row)
                    print(f"  differs: {row}")
        identical = not differing
        report["drafters"][name] = {
            "engine_s": engine_s, "replay_s": replay_s, "ratio": engine_s / replay_s, "identical": identical,
            "runs": len(skips) * len(examples), "differing": differing,
            "peak_rss_mb_after_engine": engine_rss, "peak_rss_mb_after_replay": peak_rss_mb(),
            "accept": {str(list(s)): [m.accept_length for m in engine[s]] for s in skips},
        }
        print(f"{name}: engine {engine_s:.1f} s, replay {replay_s:.1f} s ({engine_s / replay_s:.2f}x), identical={identical}")

    checks = []
    prompts = prompts_by_domain["translation"]
    cases = [(name, s) for name in drafters for s in [(), (5, 9), (8, 12, 16, 20)]] if args.profile_repeats else []
    profile = profile_for(target.model) if cases else None
    # Every case runs each prompt in turn, in alternating order, `--profile-repeats` times: the median
    # over repeats of each case's decode ms/token is compared (the outputs, hence step counts, repeat).
    decode_ms = {case: [] for case in cases}
    runs = {}
    for repeat in range(args.profile_repeats):
        seconds, tokens = dict.fromkeys(cases, 0.0), dict.fromkeys(cases, 0)
        for i, p in enumerate(prompts):
            for name, s in cases if (repeat + i) % 2 == 0 else cases[::-1]:
                r = speculative_generate(target.model, p, drafters[name](), config, s, target.eos_token_ids)
                seconds[name, s] += r.wall_time_s - r.prefill_time_s
                tokens[name, s] += r.new_tokens
                runs.setdefault((name, s), {})[i] = r
        for case in cases:
            decode_ms[case].append(1000 * seconds[case] / tokens[case])
    for (name, s), measured_all in decode_ms.items():
        results = list(runs[name, s].values())
        chunks = [n for r in results for n in r.verified_lengths]
        counts = Measurement(accept_length=0, metric=None, modeled_cost=0, flops_fraction=0, modeled_tokens_per_s=0,
                             new_tokens=sum(r.new_tokens for r in results), target_forwards=len(chunks),
                             wall_time_s=0, verified_tokens=sum(chunks), chunk_counts=count_chunks(chunks))
        modeled = 1000 * price(counts, profile, target.num_layers - len(s), draft_cost(drafters[name](), profile)).modeled_cost
        measured = float(np.median(measured_all))
        checks.append({"drafter": name, "skip": list(s), "engine_decode_ms_per_token": measured,
                       "engine_repeats_ms_per_token": measured_all, "modeled_ms_per_token": modeled,
                       "error": modeled / measured - 1})
        print(f"profile {name} skip{list(s)}: engine {measured:.1f} ms/token (decode, median of "
              f"{min(measured_all):.1f}-{max(measured_all):.1f}), modeled {modeled:.1f} ({100 * (modeled / measured - 1):+.0f}%)")
    report["profile_check"] = checks
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
