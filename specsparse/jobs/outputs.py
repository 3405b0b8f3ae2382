"""What a finished job writes and prints: the domain config map entry, measurements.csv,
samples.jsonl, summary.json, the job's figures (speedup.png, pareto.png) and the results table."""

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
from specsparse.jobs.figures import write_job_figures
from specsparse.jobs.vocab_comparison import comparison_markdown
from specsparse.measuring.fidelity import fidelity_scores
from specsparse.metrics import SCALE, metric_description
from specsparse.search.base import SearchResult
from specsparse.types import Candidate, Measurement
from specsparse.util import atomic_write_text, strict_json

if TYPE_CHECKING:
    from specsparse.data import Example
    from specsparse.jobs.result import JobResult

log = logging.getLogger(__name__)

# What timing cannot change, so two runs of one configuration (under one cost profile) write it alike,
# whichever runner measured: these files byte for byte, and these keys of summary.json.
UNTIMED_FILES = ("measurements.csv", "samples.jsonl")
UNTIMED_SUMMARY_KEYS = ("domain", "strategy", "selected_skip_layers", "calibration", "test", "intervals", "fidelity")


def untimed_summary(job_dir: Path) -> str:
    """A job folder's summary.json without its timed fields (UNTIMED_SUMMARY_KEYS), as text."""
    summary = json.loads((job_dir / "summary.json").read_text())
    return json.dumps({key: summary[key] for key in UNTIMED_SUMMARY_KEYS}, indent=1) + "\n"


def write_job_outputs(job: JobResult, calibration_examples: Sequence[Example], test_examples: Sequence[Example] = ()) -> None:
    """config_map.{yaml,json} (with the trimmed head's token ids when searched; the calibration prompts
    route requests), measurements.csv, samples.jsonl (after a test evaluation, on `test_examples`),
    summary.json (strict JSON)."""
    out = job.output_dir
    out.mkdir(parents=True, exist_ok=True)
    description = metric_description(job.metric)
    held_out = job.held_out()
    entry = replace(
        domain_config_from_result(job.domain, job.search_result, job.num_layers, job.draft_vocab_ids),
        routing_prompts=tuple("\n\n".join(ex.turns) for ex in calibration_examples),  # as builtin_prompts
        metric_name=None if description is None else description["name"],
        verdict=held_out["verdict"],
        verdict_checks={name: {key: check[key] for key in ("interval", "threshold", "state")}
                        for name, check in held_out["checks"].items()},
    )
    config_map = ConfigMap(
        model=job.description["model"],
        num_layers=job.num_layers,
        domains={job.domain: entry},
        drafter=job.recorded_drafter,  # class and options, as measured: serving builds it
        model_identity={k: v for k, v in job.description["model_identity"].items() if k != "dtype"},
    )
    write_config_map(out / "config_map", config_map)
    write_measurements_csv(out / "measurements.csv", job.search_result, job.metric)
    if job.test_dense is not None and job.test_selected is not None:
        write_samples_jsonl(out / "samples.jsonl", test_examples, job.test_dense, job.test_selected)
    if job.vocab_comparison is not None:
        atomic_write_text(out / "vocab_comparison.md", comparison_markdown(job.vocab_comparison))
    summary = job.summary()
    atomic_write_text(out / "summary.json", strict_json(summary))
    write_job_figures(summary, out)


# -- the domain's config map entry --------------------------------------------------------------------------------------
def domain_config_from_result(
    domain: str, result: SearchResult, num_layers: int, draft_vocab_ids: Sequence[int] | None = None
) -> DomainConfig:
    """The DomainConfig of a finished search: its selected configuration, dense baseline, alternatives
    and notes (metrics on 0-100); `draft_vocab_ids` are the token ids of a trimmed draft head (the
    runtime needs them). `domain` only labels errors and logs."""
    skip = result.selected.skip_layers
    m = result.selected_measurement

    def point(c, pm) -> OperatingPoint:
        return OperatingPoint(c.skip_layers, pm.accept_length, _scaled(pm.metric), pm.modeled_cost)

    cfg = DomainConfig(
        skip_layers=skip,
        accept_length=m.accept_length,
        metric=_scaled(m.metric),
        sparsity=len(skip) / num_layers,
        modeled_cost=m.modeled_cost,
        flops_fraction=m.flops_fraction,
        draft_vocab_size=len(draft_vocab_ids) if draft_vocab_ids is not None else result.selected.vocab_size,
        dense=point(result.baseline, result.dense),
        alternatives=tuple(point(c, am) for c, am in result.alternatives),
        notes=result.notes,
        draft_vocab_ids=None if draft_vocab_ids is None else tuple(int(i) for i in draft_vocab_ids),
    )
    log.info("domain %s: %s (A=%.3f, sparsity=%.3f)", domain, result.selected.label, cfg.accept_length, cfg.sparsity)
    return cfg


def _scaled(metric: float | None) -> float | None:
    return None if metric is None else SCALE * metric


# -- measurements table ----------------------------------------------------------------------------
MEASUREMENT_COLUMNS = (
    "order", "label", "skip_layers", "num_skipped", "vocab_size", "accept_length", "metric_name", "metric",
    "fidelity", "modeled_cost", "modeled_tokens_per_s", "modeled_verify_cost", "flops_fraction", "new_tokens",
    "target_forwards", "early_stopped", "feasible", "pareto", "selected",
)


def write_measurements_csv(path: str | os.PathLike, result: SearchResult, metric: str | None = None) -> Path:
    """Every configuration the search measured, in measurement order, one CSV row each (atomic write).
    skip_layers is a JSON list; metric is the domain's metric (`metric_name`) on the 0-100 scale,
    empty where undefined; fidelity the replies' mean chrF against the dense replies (0-100);
    modeled_* come from the cost profile (s/token, tokens/s, s/verification step); feasible /
    pareto / selected flag the search's conclusions. No wall time: a batched pass measures many
    configurations at once."""
    pareto = {c for c, _ in result.alternatives} | {result.selected}
    feasible = set(result.feasible)
    description = metric_description(metric)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(MEASUREMENT_COLUMNS)
    for i, (c, m) in enumerate(result.history):
        fidelity = fidelity_scores(result.dense, m)  # the mean is written: no interval to bootstrap
        writer.writerow([
            i, c.label, json.dumps(list(c.skip_layers)), len(c.skip_layers),
            "" if c.vocab_size is None else c.vocab_size, m.accept_length,
            "" if description is None else description["name"], "" if m.metric is None else SCALE * m.metric,
            "" if fidelity is None else sum(fidelity) / len(fidelity), m.modeled_cost, m.modeled_tokens_per_s,
            m.modeled_verify_cost, m.flops_fraction, m.new_tokens, m.target_forwards, m.early_stopped,
            c in feasible, c in pareto, c == result.selected,
        ])
    return atomic_write_text(path, buf.getvalue())


def write_samples_jsonl(
    path: str | os.PathLike, examples: Sequence[Example], dense: Measurement, selected: Measurement
) -> Path:
    """The test split prompt by prompt, dense vs the selection (the papers' per-sample examples, Fig. 5):
    one JSON object per prompt with the prompt (its user turns) and references, the metric of each
    reply (0-100, null without references), the selection's fidelity to the dense reply (chrF,
    0-100), accept length (tokens per verification step) and both replies. JSON lines, since model
    outputs may hold any character."""
    by_id = {ex.id: ex for ex in examples}
    fidelity = fidelity_scores(dense, selected) or [None] * len(dense.per_prompt)
    lines = []
    for d, s, f in zip(dense.per_prompt, selected.per_prompt, fidelity, strict=True):
        example = by_id.get(d.example_id)
        lines.append(strict_json({
            "example_id": d.example_id,
            "prompt": None if example is None else list(example.turns),
            "references": None if example is None else list(example.references),
            "metric_dense": None if d.metric is None else SCALE * d.metric,
            "metric_tss": None if s.metric is None else SCALE * s.metric,
            "fidelity_tss": f,
            "accept_dense": d.new_tokens / max(len(d.accept_lengths), 1),
            "accept_tss": s.new_tokens / max(len(s.accept_lengths), 1),
            "output_dense": d.output_text, "output_tss": s.output_text,
        }, indent=None))
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
    """A small text table of the job: first the measured speedups on the test split (over plain
    decoding, then over dense speculative decoding; 95% intervals over prompts), then dense vs
    selected on calibration and test (the metric on 0-100, named; modeled tok/s last), and the
    held-out verdict with each of its checks."""
    s = job.summary()
    skip = s["selected_skip_layers"]
    label = Candidate(tuple(skip), s["selected_vocab_size"]).label
    metric = s["metric"]["name"] + " (0-100)" if s["metric"] else "metric"
    width = max(28, len(metric) + 12)  # a long metric name keeps a space before its column
    lines = [f"domain {s['domain']}, search {s['strategy']}: selected {label}"
             + (f" ({len(skip)} layers skipped)" if skip else "")]
    timing = s.get("measured_timing_test")
    if timing is not None:
        lines.append(f"measured speedup over plain decoding (test split, {timing['prompts']} prompts timed side by "
                     "side, 95% CI):")
        for name in timing["labels"][1:]:
            lines.append(f"  {name:<9}{_with_interval(timing['speedups'][f'{name}/plain'], 2)}x")
        if s["measured_speedup_test"] is not None:
            lines.append(f"  selected over dense speculative decoding: "
                         f"{_with_interval(timing['speedups']['selected/dense'], 2)}x "
                         f"(modeled: {_fmt(s['modeled_speedup_test'], 2)}x)")
        rates = ", ".join(f"{name} {rate:.1f}" for name, rate in zip(timing["labels"], timing["tokens_per_s"]))
        lines.append(f"  measured tok/s: {rates}")
    lines.append(f"{'split':<12}{'config':<10}{'accept length [95% CI]':>24}{metric + ' [95% CI]':>{width}}"
                 f"{'fidelity [95% CI]':>24}{'modeled tok/s':>15}")
    for split in ("calibration", "test"):
        intervals = s["intervals"][split] or {}
        for which in ("dense", "selected"):
            m = s[split][which]
            if m is None:
                continue
            accept = _with_interval(intervals.get(f"accept_{which}"), 2)
            value = _with_interval(intervals.get(f"metric_{which}"), 1) if m["metric"] is not None else "n/a"
            fidelity = "100.0" if which == "dense" else _with_interval(s["fidelity"][split], 1)
            lines.append(f"{split:<12}{which:<10}{accept:>24}{value:>{width}}{fidelity:>24}"
                         f"{_fmt(m['modeled_tokens_per_s'], 1):>15}")
    held = s["held_out"]
    lines.append(f"held-out verdict: {held['verdict'].upper()}")
    checks = held.get("checks") or {}
    lines += [f"  {c['text']}" for c in checks.values()] or [f"  {reason}" for reason in held["reasons"]]
    c = s["search_cost"]
    lines.append(
        f"{c['configurations_measured']} configurations measured, "
        f"{c['cache_hits']} from the store, search {c['wall_time_s']:.1f} s"
    )
    for note in s["notes"]:
        lines.append(f"note: {note}")
    if rows := s["info"].get("measured_selection"):
        lines.append("select=measured, the front timed side by side on calibration prompts (speedup over dense):")
        lines += [f"  {r['configuration']:<16} modeled {_fmt(r['modeled_speedup_vs_dense'], 2)}x   measured "
                  f"{_with_interval(r['measured_speedup_vs_dense'], 2)}x" for r in rows]
    if job.vocab_comparison is not None:
        lines += [f"draft vocabularies on the test split, timed side by side on {job.vocab_comparison['prompts']} "
                  "prompts (vocab_comparison.md):", comparison_markdown(job.vocab_comparison).rstrip()]
    return "\n".join(lines)
