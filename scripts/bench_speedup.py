"""Measured speedup of speculative decoding over plain decoding, per domain and drafter, on the fast and
the eager forward path, side by side in one process.

    python scripts/bench_speedup.py --domains summarization,rag,translation --drafters samd_paper,samd,pld
    python scripts/bench_speedup.py --model tiny --domains qa --drafters pld --prompts 2   # smoke size

Each drafter is built as a job builds it: conf/ composed with `drafter=<name> domain=<name>` plus
--override, validated by the job's own checks (`specsparse.jobs.config.build_plan`), and made by the
test split's Evaluator (so its corpus and warm table leave the test split out). On the first
--prompts test prompts of each domain, plain decoding and each drafter run on both paths, interleaved
prompt by prompt in alternating order (`specsparse.measuring.timing.time_runners`), after one warm-up
run each; every ratio has a
95% paired-bootstrap interval over prompts. Replies are compared with plain decoding on the same path
(lossless: all equal) and across paths (near-ties can differ).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from specsparse.data import build_messages
from specsparse.decoding.generation import generate_text
from specsparse.jobs.config import build_plan
from specsparse.measuring.evaluation import Evaluator
from specsparse.measuring.timing import time_runners

CONF = Path(__file__).resolve().parents[1] / "conf"
PATHS = ("eager", "fast")


def evaluation_spec(model: str, domain: str, drafter: str, overrides: list[str], output: Path):
    """The test split's EvaluationSpec of the job `drafter=<drafter> domain=<domain>` would run."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"model={model}", f"domain={domain}", f"drafter={drafter}", "logger=none",
                                           *overrides])
    config = OmegaConf.to_container(cfg, resolve=True)
    plan = build_plan(config, output_dir=output, cwd=os.getcwd(), choices={"drafter": drafter, "domain": domain})
    return plan.evaluation.with_split("test")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2_135m", help="a conf/model option")
    parser.add_argument("--domains", default="summarization,rag,translation")
    parser.add_argument("--drafters", default="samd_paper,samd,pld", help="conf/drafter options")
    parser.add_argument("--prompts", type=int, default=20, help="test prompts timed per domain")
    parser.add_argument("--paths", default=",".join(PATHS), help="forward paths, comma-separated (eager, fast)")
    parser.add_argument("--override", action="append", default=[], help="more Hydra overrides (repeatable)")
    parser.add_argument("--output", default="outputs/bench_speedup.json")
    args = parser.parse_args(argv)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    started, load_start = time.time(), os.getloadavg()
    results, lines = {}, []
    for domain in args.domains.split(","):
        runners = []
        for drafter in args.drafters.split(","):
            spec = evaluation_spec(args.model, domain, drafter, args.override, output.parent)
            for path in args.paths.split(","):
                evaluator = Evaluator(replace(spec, forward_path=path))
                examples = evaluator.examples[: args.prompts]
                if not any(label == f"plain {path}" for label, _ in runners):
                    runners.append((f"plain {path}", runner(evaluator, None)))
                runners.append((f"{drafter} {path}", runner(evaluator, evaluator.drafter_factory(None))))
        for _, run in runners:  # warm-up: lazy set-up (automata, tables, first-call kernels) stays out of the timing
            run(examples[0])
        timing = time_runners(examples, runners, progress=True)
        results[domain] = timing.as_dict()
        lines += [f"### {domain}: {timing.prompts} test prompts", "",
                  "| configuration | tokens/s | accept length | over plain, same path [95% CI] | over eager plain "
                  "[95% CI] | replies equal to plain: same path, eager |", "|---|---|---|---|---|---|"]
        eager_plain = "plain eager" if "plain eager" in timing.labels else None
        for index, label in enumerate(timing.labels):
            path = label.rsplit(" ", 1)[1]
            plain = timing.labels.index(f"plain {path}")
            lossless = sum(a == b for a, b in zip(timing.outputs[index], timing.outputs[plain]))
            lines.append(f"| {label} | {timing.tokens_per_s[index]:.1f} | {timing.accept_lengths[index]:.2f} | "
                         f"{_ratio(timing.speedup(label, f'plain {path}'))} | {_ratio(eager_plain and timing.speedup(label, eager_plain))} "
                         f"| {lossless}/{timing.prompts}, {timing.same_as_first[index]}/{timing.prompts} |")
        lines.append("")
    header = (f"model {args.model}, drafters {args.drafters}, overrides {args.override or 'none'}; "
              f"{(time.time() - started) / 60:.1f} min; load average {'/'.join(f'{x:.2f}' for x in load_start)} at start, "
              f"{'/'.join(f'{x:.2f}' for x in os.getloadavg())} at end")
    text = "\n".join([header, "", *lines])
    print(text)
    output.write_text(json.dumps({"header": header, "args": vars(args), "domains": results}, indent=2))
    output.with_suffix(".md").write_text(text + "\n")


def runner(evaluator, make_drafter):
    """One example's first turn through the engine on the evaluator's target (plain when `make_drafter` is None)."""
    def run(example):
        messages = build_messages(evaluator.domain, example, 0, [])
        drafter = None if make_drafter is None else make_drafter()
        return generate_text(evaluator.target, messages, drafter, evaluator.spec.generation)[1]
    return run


def _ratio(value: list[float] | None) -> str:
    return "-" if value is None else f"{value[0]:.2f}x [{value[1]:.2f}-{value[2]:.2f}]"


if __name__ == "__main__":
    main()
