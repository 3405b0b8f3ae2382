"""What a finished job writes and prints: the domain config map entry, measurements.csv,
samples.jsonl, summary.json and the results table."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsparse.config_map import ConfigMap, DomainConfig, OperatingPoint, write_config_map
from specsparse.search.base import SearchResult
from specsparse.types import Candidate, Measurement
from specsparse.util import atomic_write_text

if TYPE_CHECKING:
    from specsparse.jobs.job import JobResult
    from specsparse.measuring.evaluation import Evaluator

log = logging.getLogger(__name__)


def write_job_outputs(job: JobResult, calibration: Evaluator) -> None:
    """config_map.{yaml,json} (with the trimmed head's token ids when searched), measurements.csv,
    samples.jsonl (after a test evaluation), summary.json."""
    out = job.output_dir
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = job.search_result.selected.vocab_size
    vocab_ids = None if vocab_size is None else calibration.vocab_ids(vocab_size)
    config_map = ConfigMap(
        model=calibration.spec.model,
        num_layers=job.num_layers,
        domains={job.domain: replace(
            domain_config_from_result(job.domain, job.search_result, job.num_layers, vocab_ids),
            routing_prompts=tuple("\n\n".join(ex.turns) for ex in calibration.examples),  # as builtin_prompts
        )},
        drafter=calibration.spec.drafter.name,
        model_identity={k: v for k, v in calibration.target.identity.items() if k != "dtype"},
    )
    write_config_map(out / "config_map", config_map)
    write_measurements_csv(out / "measurements.csv", job.search_result)
    if job.test_dense is not None and job.test_selected is not None:
        write_samples_jsonl(out / "samples.jsonl", job.test_dense, job.test_selected)
    atomic_write_text(out / "summary.json", json.dumps(job.summary(), indent=2))


# -- the domain's config map entry --------------------------------------------------------------------------------------
def domain_config_from_result(
    domain: str, result: SearchResult, num_layers: int, draft_vocab_ids: Sequence[int] | None = None
) -> DomainConfig:
    """The DomainConfig of a finished search: its selected configuration, dense baseline, alternatives
    and notes; `draft_vocab_ids` are the token ids of a trimmed draft head (the runtime needs them).
    `domain` only labels errors and logs."""
    skip = result.selected.skip_layers
    m = result.selected_measurement

    def point(c, pm) -> OperatingPoint:
        return OperatingPoint(c.skip_layers, pm.accept_length, pm.metric, pm.cost)

    cfg = DomainConfig(
        skip_layers=skip,
        accept_length=m.accept_length,
        metric=m.metric,
        sparsity=len(skip) / num_layers,
        cost=m.cost,
        flops_fraction=m.flops_fraction,
        draft_vocab_size=len(draft_vocab_ids) if draft_vocab_ids is not None else result.selected.vocab_size,
        dense=point(result.baseline, result.dense),
        alternatives=tuple(point(c, am) for c, am in result.alternatives),
        notes=result.notes,
        draft_vocab_ids=None if draft_vocab_ids is None else tuple(int(i) for i in draft_vocab_ids),
    )
    log.info("domain %s: %s (A=%.3f, sparsity=%.3f)", domain, result.selected.label, cfg.accept_length, cfg.sparsity)
    return cfg


# -- measurements table ----------------------------------------------------------------------------
MEASUREMENT_COLUMNS = (
    "order", "label", "skip_layers", "num_skipped", "vocab_size", "accept_length", "metric", "cost",
    "flops_fraction", "tokens_per_s", "new_tokens", "target_forwards", "wall_time_s", "draft_time_s",
    "early_stopped", "feasible", "pareto", "selected",
)


def write_measurements_csv(path: str | os.PathLike, result: SearchResult) -> Path:
    """Every configuration the search measured, in measurement order, one CSV row each (atomic write).
    skip_layers is a JSON list; feasible / pareto / selected flag the search's conclusions."""
    pareto = {c for c, _ in result.alternatives} | {result.selected}
    feasible = set(result.feasible)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(MEASUREMENT_COLUMNS)
    for i, (c, m) in enumerate(result.history):
        writer.writerow([
            i, c.label, json.dumps(list(c.skip_layers)), len(c.skip_layers),
            "" if c.vocab_size is None else c.vocab_size, m.accept_length, "" if m.metric is None else m.metric,
            m.cost, m.flops_fraction, m.tokens_per_s, m.new_tokens, m.target_forwards, m.wall_time_s,
            m.draft_time_s, m.early_stopped, c in feasible, c in pareto, c == result.selected,
        ])
    return atomic_write_text(path, buf.getvalue())


def write_samples_jsonl(path: str | os.PathLike, dense: Measurement, selected: Measurement) -> Path:
    """The test split prompt by prompt, dense vs the selection (the papers' per-sample examples, Fig. 5):
    one JSON object per prompt with its metric (null without references), accept length (tokens per
    verification step) and output text. JSON lines, since model outputs may hold any character."""
    lines = [json.dumps({
        "example_id": d.example_id, "metric_dense": d.metric, "metric_tss": s.metric,
        "accept_dense": d.new_tokens / max(len(d.accept_lengths), 1),
        "accept_tss": s.new_tokens / max(len(s.accept_lengths), 1),
        "output_dense": d.output_text, "output_tss": s.output_text,
    }) for d, s in zip(dense.per_prompt, selected.per_prompt, strict=True)]
    return atomic_write_text(path, "".join(line + "\n" for line in lines))


# -- the table printed at the end ------------------------------------------------------------------
def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _with_interval(values: list[float] | None, digits: int = 3) -> str:
    if values is None:
        return "n/a"
    point, low, high = values
    return f"{point:.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"


def results_table(job: JobResult) -> str:
    """A small text table of the job: dense vs selected on calibration and test (95% intervals over
    prompts), the side-by-side timing against plain decoding, and whether the selection held."""
    s = job.summary()
    skip = s["selected_skip_layers"]
    label = Candidate(tuple(skip), s["selected_vocab_size"]).label
    lines = [
        f"domain {s['domain']}, search {s['strategy']}: selected {label}"
        + (f" ({len(skip)} layers skipped)" if skip else ""),
        f"{'split':<12}{'config':<10}{'accept length [95% CI]':>24}{'metric [95% CI]':>24}{'modeled tok/s':>15}",
    ]
    for split in ("calibration", "test"):
        intervals = s["intervals"][split] or {}
        for which in ("dense", "selected"):
            m = s[split][which]
            if m is None:
                continue
            accept = _with_interval(intervals.get(f"accept_{which}"), 2)
            metric = _with_interval(intervals.get(f"metric_{which}")) if m["metric"] is not None else "n/a"
            lines.append(f"{split:<12}{which:<10}{accept:>24}{metric:>24}{_fmt(m['tokens_per_s'], 1):>15}")
    timing = s.get("timing_test")
    if timing is not None:
        rates = ", ".join(f"{name} {rate:.1f}" for name, rate in zip(timing["labels"], timing["tokens_per_s"]))
        lines.append(f"test, timed side by side on {timing['prompts']} prompts (engine, tok/s): {rates}")
        for name in timing["labels"][1:]:
            lines.append(f"  {name} vs plain decoding: {_with_interval(timing['speedups'][f'{name}/plain'], 2)}x")
        if s["speedup_test"] is not None:
            lines.append(f"  selected vs dense: {_with_interval(timing['speedups']['selected/dense'], 2)}x measured, "
                         f"{_fmt(s['speedup_test_modeled'], 2)}x modeled")
    held = s["held_out"]
    verdict = {"held": "HELD on the test split", "did not hold": "DID NOT HOLD on the test split"}.get(held["verdict"], held["verdict"])
    lines.append(f"held-out verdict: {verdict}" + ("" if not held["reasons"] else f" ({'; '.join(held['reasons'])})"))
    c = s["search_cost"]
    lines.append(
        f"{c['configurations_measured']} configurations measured, "
        f"{c['cache_hits']} from the store, search {c['wall_time_s']:.1f} s"
    )
    for note in s["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)
