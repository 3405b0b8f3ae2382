"""Where the cost model and the engine's timing part: dense and some skip sets timed side by side on one
domain, each configuration's time split into its terms (prefill, verification forwards, drafting, the rest
of the loop), beside the cost profile's price of the very steps that ran.

    python scripts/bench_cost_model.py --domain summarization --drafter samd --skip 13,25 --skip 6,13 --skip 13
    python scripts/bench_cost_model.py --model tiny --domain qa --drafter pld --skip 1 --prompts 2   # smoke size

Configurations are built as a job builds them (`bench_speedup.evaluation_spec`: conf/ composed, validated by the
job's checks) and timed by `specsparse.study.study.time_with_plain` on the first --prompts test prompts,
interleaved, --repeats times each, after one warm-up run each. The model priced on the timed steps
(`Pricer.with_modeled_terms`) removes reply and accept length differences from the comparison: what is left is the
model's own error, term by term. "modeled" columns come from the cost profile, every other from the engine.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from bench_speedup import evaluation_spec

from specsparse.jobs.job import labelled
from specsparse.measuring.evaluation import Evaluator
from specsparse.study.study import time_with_plain
from specsparse.types import Candidate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2_135m", help="a conf/model option")
    parser.add_argument("--domain", default="summarization")
    parser.add_argument("--drafter", default="samd", help="a conf/drafter option")
    parser.add_argument("--skip", action="append", default=[], help="a skip set, comma-separated (repeatable)")
    parser.add_argument("--prompts", type=int, default=16, help="test prompts timed")
    parser.add_argument("--repeats", type=int, default=2, help="timings per prompt and configuration")
    parser.add_argument("--override", action="append", default=[], help="more Hydra overrides (repeatable)")
    parser.add_argument("--output", default="outputs/bench_cost_model.json")
    args = parser.parse_args(argv)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    started, load_start = time.time(), os.getloadavg()
    spec = evaluation_spec(args.model, args.domain, args.drafter, args.override, output.parent)
    evaluator = Evaluator(spec)
    candidates = [Candidate(), *(Candidate(tuple(sorted(int(x) for x in s.split(",")))) for s in args.skip)]
    time_with_plain(evaluator, labelled(candidates), prompts=1, progress=False)  # warm-up: set-up stays out of the timing
    timing = time_with_plain(evaluator, labelled(candidates), prompts=args.prompts, repeats=args.repeats)
    terms = dict(zip(timing.labels, timing.terms))
    dense = terms["dense"]
    lines = [f"model {args.model}, {args.domain}, drafter {args.drafter}, {timing.prompts} test prompts x {args.repeats}; "
             f"{(time.time() - started) / 60:.1f} min; load average {'/'.join(f'{x:.2f}' for x in load_start)} at start, "
             f"{'/'.join(f'{x:.2f}' for x in os.getloadavg())} at end", "",
             "| configuration | accept length | ms/token | modeled | modeled / measured | prefill | modeled prefill | verify "
             "| modeled verify | draft | modeled draft | other | over dense [95% CI] | modeled over dense "
             "| over dense without prefill |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for index, label in enumerate(timing.labels):
        t = terms[label]
        over = timing.speedup(label, "dense") if label not in ("dense", "plain") else None
        without_prefill = ((dense["ms_per_token"] - dense["prefill_ms_per_token"])
                           / (t["ms_per_token"] - t["prefill_ms_per_token"]))
        lines.append(
            f"| {label} | {timing.accept_lengths[index]:.2f} | {t['ms_per_token']:.2f} | {t['modeled_ms_per_token']:.2f} | "
            f"{t['modeled_ms_per_token'] / t['ms_per_token']:.2f} | {t['prefill_ms_per_token']:.2f} | "
            f"{t['modeled_prefill_ms_per_token']:.2f} | "
            f"{t['verify_ms_per_token']:.2f} | {t['modeled_verify_ms_per_token']:.2f} | {t['draft_ms_per_token']:.2f} | "
            f"{t['modeled_draft_ms_per_token']:.2f} | {t['other_ms_per_token']:.2f} | "
            f"{'-' if over is None else f'{over[0]:.2f}x [{over[1]:.2f}-{over[2]:.2f}]'} | "
            f"{dense['modeled_ms_per_token'] / t['modeled_ms_per_token']:.2f}x | {without_prefill:.2f}x |")
    text = "\n".join(lines)
    print(text)
    output.write_text(json.dumps({"args": vars(args), "timing": timing.as_dict()}, indent=2))
    output.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
