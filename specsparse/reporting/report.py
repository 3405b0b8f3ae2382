"""The paper's tables and figures, rebuilt from job outputs and the results store (or W&B runs).

    records = find_jobs(["outputs/multirun/2025-01-01_10-00-00"])   # every summary.json below
    paths = build_report(records, out_dir="outputs/report", stores=["outputs/store.sqlite"])

Table 1 (per model, method = drafter, and domain, TSS): native vs TSS accept length, metric, tokens/s
and the speedup measured side by side on the test split (with its 95% interval) beside the modeled
one, and the share of layers skipped, from the held-out test evaluation of the latest job of the TSS
strategy (`strategy`, default "bfs"). A speedup is never computed from timings of different runs.
Table 2 (per model, method, domain and strategy): selected skip set, accept length A, metric M,
measured tokens/s and speedup on the test split, cost, configurations measured and search wall time.
Each table is written as Markdown, LaTeX and CSV. Figures (PNG): the Pareto front per domain (A vs M,
cost as colour, selected configuration marked) from the job's measurements.csv, per test prompt dense
vs TSS (Fig. 5) from its samples.jsonl, the single-layer skip ablation (change in A and M per skipped
layer, per domain; Fig. 3) and the dense accept length per domain and drafter (Fig. 2) from the
store's measurements. A metric that does not exist (domains without references) shows as "n/a", never 0.

`merge_config_maps` joins the per-job domain config maps into the one multi-domain map the runtime
controller reads.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from specsparse.config_map import ConfigMap, ConfigMapError, load_config_map, merge_config_maps, write_config_map
from specsparse.decoding.models import load_model_cached
from specsparse.jobs.outputs import upgrade_summary
from specsparse.measuring.evaluation import DomainSpec
from specsparse.measuring.intervals import mean_interval
from specsparse.reporting.ablation import plot_ablation, single_layer_ablation
from specsparse.reporting.figures import (
    dense_accept_lengths,
    plot_dense_accept,
    plot_pareto,
    plot_samples,
    plot_vocab_coverage,
)
from specsparse.reporting.mixed_stream import round_robin, run_mixed_stream
from specsparse.search import STRATEGY_NAMES
from specsparse.serving.controller import Controller
from specsparse.serving.router import make_router, map_routing_prompts
from specsparse.study.store import ResultsStore
from specsparse.types import Component, GenerationConfig
from specsparse.util import atomic_write_text, first_line, strict_json

log = logging.getLogger(__name__)

NA = "n/a"


class ReportError(ValueError):
    """Nothing to report from, or inputs that do not fit together (one-line message)."""


# -- inputs ----------------------------------------------------------------------------------------
@dataclass
class JobRecord:
    """One finished job: its summary.json, and reproduce.json / config map when there is a folder."""

    summary: dict[str, Any]
    directory: Path | None = None
    reproduce: dict[str, Any] = field(default_factory=dict)
    source: str = "outputs"

    @property
    def domain(self) -> str:
        return self.summary["domain"]

    @property
    def strategy(self) -> str:
        return self.summary["strategy"]

    @property
    def model(self) -> str:
        model = self.reproduce.get("model")
        if isinstance(model, dict):
            return str(model.get("name") or model.get("source"))
        return str(model or self.summary.get("model") or "model")

    @property
    def drafter(self) -> str | None:
        return self.reproduce.get("drafter") or self.summary.get("drafter")

    @property
    def num_layers(self) -> int | None:
        n = self.reproduce.get("num_layers") or self.summary.get("num_layers")
        if n is None and isinstance(self.reproduce.get("model"), dict):
            n = self.reproduce["model"].get("num_layers")
        if n is None and self.directory is not None and (self.directory / "config_map.yaml").is_file():
            n = load_config_map(self.directory / "config_map.yaml").num_layers
        return n

    @property
    def order(self) -> str:
        """Sorts jobs by time (latest last)."""
        finished = self.reproduce.get("finished") or self.summary.get("finished") or ""
        if not finished and self.directory is not None:
            finished = str((self.directory / "summary.json").stat().st_mtime)
        return str(finished)


def find_jobs(paths: Iterable[str | os.PathLike]) -> list[JobRecord]:
    """Every job (summary.json) under `paths` (folders searched recursively, or summary.json files)."""
    files: list[Path] = []
    for path in paths:
        p = Path(path)
        if p.is_file() and p.name == "summary.json":
            files.append(p)
        elif p.is_dir():
            files.extend(f for f in sorted(p.rglob("summary.json")) if not {"wandb", "ray_tune"} & set(f.parts))
        else:
            raise ReportError(f"{p}: no such job folder or summary.json")
    records = []
    for file in dict.fromkeys(f.resolve() for f in files):
        summary = _read_json(file)
        if not isinstance(summary, dict) or "domain" not in summary or "strategy" not in summary:
            continue
        reproduce_file = file.parent / "reproduce.json"
        reproduce = _read_json(reproduce_file) if reproduce_file.is_file() else {}
        records.append(JobRecord(upgrade_summary(summary), file.parent, reproduce if isinstance(reproduce, dict) else {}))
    return sorted(records, key=lambda r: r.order)


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ReportError(f"{file}: unreadable ({first_line(err)}): rerun its job, or leave its folder out") from None


def wandb_jobs(path: str, timeout: int = 30) -> list[JobRecord]:
    """Jobs from W&B runs of `entity/project` (their summaries are the jobs' summary.json)."""
    from specsparse.reporting.wandb_logger import has_api_key, import_wandb  # noqa: PLC0415

    if not has_api_key():  # else wandb.Api raises (or prompts for a key on a terminal)
        raise ReportError(f"--wandb {path} reads runs from the W&B server and needs an API key: "
                          "run `wandb login` or set WANDB_API_KEY")
    api = import_wandb().Api(timeout=timeout)
    records = []
    for run in api.runs(path):
        summary = {k: v for k, v in dict(run.summary).items() if not k.startswith("_")}
        if "domain" not in summary or "strategy" not in summary:
            continue
        summary = upgrade_summary(json.loads(strict_json(summary)))
        reproduce = {"model": summary.get("model"), "num_layers": summary.get("num_layers"),
                     "finished": str(run.created_at)}
        records.append(JobRecord(summary, None, reproduce, source=f"wandb:{run.path}"))
    return sorted(records, key=lambda r: r.order)


def read_measurements(path: str | os.PathLike) -> pd.DataFrame | None:
    """A job's measurements.csv as a DataFrame (metric NaN where undefined), or None if missing."""
    path = Path(path)
    if not path.is_file():
        return None
    frame = pd.read_csv(path)
    for column in ("early_stopped", "feasible", "pareto", "selected"):
        if column in frame:
            frame[column] = frame[column].astype(str).str.lower().eq("true")
    return frame


# -- selecting jobs --------------------------------------------------------------------------------
def latest(records: Iterable[JobRecord], *keys: str) -> dict[tuple, JobRecord]:
    """The latest record per key tuple (attribute names of JobRecord)."""
    chosen: dict[tuple, JobRecord] = {}
    for record in sorted(records, key=lambda r: r.order):
        chosen[tuple(getattr(record, k) for k in keys)] = record
    return chosen


def tss_jobs(
    records: Sequence[JobRecord], strategy: str = "bfs", keys: tuple[str, ...] = ("model", "domain")
) -> dict[tuple, JobRecord]:
    """Latest job per `keys` (JobRecord attributes) of `strategy`; keys with none fall back to their
    latest job (Table 1's strategy column says which)."""
    picked = latest([r for r in records if r.strategy == strategy], *keys)
    for key, record in latest(records, *keys).items():
        picked.setdefault(key, record)
    return dict(sorted(picked.items(), key=lambda item: tuple(str(k) for k in item[0])))


# -- tables ----------------------------------------------------------------------------------------
# Every table is built as a full numeric frame (written as CSV: a 95% interval is two numeric columns
# <name>_low / <name>_high) and shown in Markdown / LaTeX in a slim layout with the intervals in brackets.
# Metrics are on 0-100 (`metric_name` says which); measured_* come from the engine, timed side by side
# within one job, modeled_* from the cost profile.
def _split_numbers(summary: dict[str, Any]) -> tuple[str, dict | None, dict | None]:
    test = summary.get("test") or {}
    if test.get("dense") and test.get("selected"):
        return "test", test["dense"], test["selected"]
    calibration = summary.get("calibration") or {}
    return "calibration", calibration.get("dense"), calibration.get("selected")


def _get(m: dict | None, key: str) -> float | None:
    if not m:
        return None
    value = m.get(key)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _with_bounds(name: str, values: Sequence[float] | None, point: float | None = None) -> dict[str, float | None]:
    """{name: point, name_low: low, name_high: high} from [point, low, high] (or [low, high] and `point`)."""
    if not values:
        return {name: point, f"{name}_low": None, f"{name}_high": None}
    if len(values) == 2:
        return {name: point, f"{name}_low": values[0], f"{name}_high": values[1]}
    return {name: values[0], f"{name}_low": values[1], f"{name}_high": values[2]}


def _interval(summary: dict[str, Any], split: str, key: str) -> list[float] | None:
    return ((summary.get("intervals") or {}).get(split) or {}).get(key)


def _metric_name(summary: dict[str, Any]) -> str | None:
    return (summary.get("metric") or {}).get("name")


def table1(records: Sequence[JobRecord], strategy: str = "bfs") -> pd.DataFrame:
    """Per model, method (drafter) and domain: native vs TSS accept length and metric with 95%
    intervals, the replies' fidelity to dense, plain decoding and the measured speedups (TSS over
    native, and TSS over plain decoding) with intervals, the modeled speedup, the skipped layers and
    the held-out verdict. `slim_table1` is the paper's layout of it."""
    rows = []
    for (model, method, domain), record in tss_jobs(records, strategy, ("model", "drafter", "domain")).items():
        s = record.summary
        split, dense, selected = _split_numbers(s)
        skip = s.get("selected_skip_layers") or []
        n = record.num_layers
        test = split == "test"
        modeled = None
        if _get(dense, "modeled_tokens_per_s") and _get(selected, "modeled_tokens_per_s") is not None:
            modeled = selected["modeled_tokens_per_s"] / dense["modeled_tokens_per_s"]
        versus_plain = s.get("measured_speedup_test_vs_plain") or s.get("measured_speedup_dense_vs_plain")
        rows.append({
            "model": model, "method": method, "domain": domain, "strategy": record.strategy, "split": split,
            **_with_bounds("accept_native", _interval(s, split, "accept_dense"), _get(dense, "accept_length")),
            **_with_bounds("accept_tss", _interval(s, split, "accept_selected"), _get(selected, "accept_length")),
            "metric_name": _metric_name(s),
            **_with_bounds("metric_native", _interval(s, split, "metric_dense"), _get(dense, "metric")),
            **_with_bounds("metric_tss", _interval(s, split, "metric_selected"), _get(selected, "metric")),
            **_with_bounds("fidelity_tss", (s.get("fidelity") or {}).get(split)),
            "measured_plain_tokens_per_s": s.get("measured_plain_tokens_per_s_test") if test else None,
            "measured_tokens_per_s_native": _measured_rate(s, "dense") if test else None,
            "measured_tokens_per_s_tss": _measured_rate(s, "selected", "dense") if test else None,
            **_with_bounds("measured_speedup_vs_plain", versus_plain if test else None),
            **_with_bounds("measured_speedup", s.get("measured_speedup_test_interval") if test else None,
                           s.get("measured_speedup_test") if test else None),
            "modeled_speedup": modeled,
            "skipped_layers": json.dumps(skip),
            "skipped_ratio": (len(skip) / n) if n else None,
            "verdict": (s.get("held_out") or {}).get("verdict"),
        })
    return pd.DataFrame(rows, columns=TABLE1_COLUMNS)


def _bounded(name: str) -> list[str]:
    return [name, f"{name}_low", f"{name}_high"]


TABLE1_COLUMNS = ["model", "method", "domain", "strategy", "split", *_bounded("accept_native"), *_bounded("accept_tss"),
                  "metric_name", *_bounded("metric_native"), *_bounded("metric_tss"), *_bounded("fidelity_tss"),
                  "measured_plain_tokens_per_s", "measured_tokens_per_s_native", "measured_tokens_per_s_tss",
                  *_bounded("measured_speedup_vs_plain"), *_bounded("measured_speedup"), "modeled_speedup",
                  "skipped_layers", "skipped_ratio", "verdict"]
TABLE2_COLUMNS = ["model", "method", "domain", "strategy", "split", "selected_skip_layers", *_bounded("accept"),
                  "metric_name", *_bounded("metric"), *_bounded("fidelity"), "measured_tokens_per_s",
                  *_bounded("measured_speedup"), "measured_speedup_vs_plain", "verdict", "modeled_ms_per_token",
                  "configurations", "new_measurements", "search_wall_time_s"]


def _measured_rate(summary: dict[str, Any], label: str, fallback: str | None = None) -> float | None:
    """Engine tokens/s of `label` in the job's side-by-side timing (`fallback` when the job timed no
    such configuration: a dense pick is timed as "dense")."""
    timing = summary.get("measured_timing_test") or {}
    rates = dict(zip(timing.get("labels", ()), timing.get("tokens_per_s", ())))
    return rates.get(label, rates.get(fallback) if fallback else None)


def table2(records: Sequence[JobRecord]) -> pd.DataFrame:
    """Per domain and strategy: selected skip set, A, M and fidelity with intervals, the measured
    speedup over dense, modeled cost, configurations measured, search time.

    configurations: configurations the search evaluated (new measurements plus store hits);
    new_measurements and search_wall_time_s count only the job's own run.
    measured_tokens_per_s: the pick's engine throughput in its own job's side-by-side timing; rows
    come from different runs, so compare `measured_speedup` (the pick over dense, timed in the same
    run) across rows.
    Random search has two rows, labelled: its best draw (the pick) and the mean over all its draws.
    """
    rows = []
    groups = latest(records, "model", "drafter", "domain", "strategy")
    for (model, method, domain, strategy), record in sorted(groups.items(), key=lambda i: tuple(map(str, i[0]))):
        s = record.summary
        split, _, selected = _split_numbers(s)
        test = split == "test"
        cost = s["search_cost"]
        label = json.dumps(s.get("selected_skip_layers") or [])
        if s.get("selected_vocab_size") is not None:
            label += f" vocab={s['selected_vocab_size']}"
        modeled_cost = _get(selected, "modeled_cost")
        draws = s.get("random_draws")
        rows.append({
            "model": model, "method": method, "domain": domain, "split": split,
            "strategy": strategy if not draws else f"{strategy}: best of {draws['draws']} draws",
            "selected_skip_layers": label,
            **_with_bounds("accept", _interval(s, split, "accept_selected"), _get(selected, "accept_length")),
            "metric_name": _metric_name(s),
            **_with_bounds("metric", _interval(s, split, "metric_selected"), _get(selected, "metric")),
            **_with_bounds("fidelity", (s.get("fidelity") or {}).get(split)),
            "measured_tokens_per_s": _measured_rate(s, "selected", "dense") if test else None,
            **_with_bounds("measured_speedup", s.get("measured_speedup_test_interval") if test else None,
                           s.get("measured_speedup_test") if test else None),
            "measured_speedup_vs_plain": (s.get("measured_speedup_test_vs_plain") or [None])[0] if test else None,
            "verdict": (s.get("held_out") or {}).get("verdict"),
            "modeled_ms_per_token": None if modeled_cost is None else 1000 * modeled_cost,
            "configurations": cost["configurations_measured"] + cost.get("cache_hits", 0),
            "new_measurements": cost["configurations_measured"],
            "search_wall_time_s": cost.get("wall_time_s"),
        })
        if draws:
            rows.append(_mean_of_draws_row(rows[-1], draws, split))
    return pd.DataFrame(rows, columns=TABLE2_COLUMNS)


def _mean_of_draws_row(best: dict[str, Any], draws: dict[str, Any], split: str) -> dict[str, Any]:
    """Random search's second Table 2 row: accept length and metric averaged over every draw on `split`,
    the bounds being the lowest and highest draw (a range, not an interval; the row's strategy says so).
    Only the best draw is timed, so the row has no measured speedup."""
    stats = draws.get(split) or {}
    row = {column: None for column in TABLE2_COLUMNS}
    row.update({key: best[key] for key in ("model", "method", "domain", "split", "metric_name", "configurations",
                                           "new_measurements", "search_wall_time_s")})
    row["strategy"] = f"random: mean [min-max] of {draws['draws']} draws"
    row["selected_skip_layers"] = f"{draws['draws']} sets of {len(draws['best_draw'])} layers"
    for name, key in (("accept", "accept_of_draws"), ("metric", "metric_of_draws")):
        values = stats.get(key)
        if values:
            row.update(_with_bounds(name, [values["mean"], values["min"], values["max"]]))
    cost = stats.get("modeled_cost_of_draws")
    row["modeled_ms_per_token"] = None if not cost else 1000 * cost["mean"]
    return row


VOCAB_COLUMNS = ["model", "method", "domain", "corpus", "in_domain", "k", "coverage", "split", "accept_full",
                 "accept_trimmed", "modeled_tokens_per_s_full", "modeled_tokens_per_s_trimmed",
                 *_bounded("measured_speedup"), "measured_speedup_vs_plain"]


def table_vocab(records: Sequence[JobRecord]) -> pd.DataFrame:
    """Vocabulary trimming per domain (the vocabulary paper's in- vs out-of-domain comparison): the
    kept ids come from the job's corpus; the job's domain is in domain when the corpus holds its
    texts. Accept length and modeled tokens/s of the full and the trimmed head on the test split;
    measured_speedup: trimmed over full, timed side by side in the job."""
    rows = []
    groups = latest([r for r in records if r.summary.get("vocab_corpus")], "model", "drafter", "domain")
    for (model, method, domain), record in sorted(groups.items(), key=lambda i: tuple(map(str, i[0]))):
        s = record.summary
        split, full, trimmed = _split_numbers(s)
        test = split == "test"
        corpus = s["vocab_corpus"]
        rows.append({
            "model": model, "method": method, "domain": domain,
            "corpus": ", ".join(Path(e).name if "/" in e else e for e in corpus["entries"]),
            "in_domain": {True: "in domain", False: "out of domain", None: "unknown"}[corpus["in_domain"]],
            "k": s.get("selected_vocab_size"), "coverage": (s.get("info") or {}).get("coverage"), "split": split,
            "accept_full": _get(full, "accept_length"), "accept_trimmed": _get(trimmed, "accept_length"),
            "modeled_tokens_per_s_full": _get(full, "modeled_tokens_per_s"),
            "modeled_tokens_per_s_trimmed": _get(trimmed, "modeled_tokens_per_s"),
            **_with_bounds("measured_speedup", s.get("measured_speedup_test_interval") if test else None,
                           s.get("measured_speedup_test") if test else None),
            "measured_speedup_vs_plain": (s.get("measured_speedup_test_vs_plain") or [None])[0] if test else None,
        })
    return pd.DataFrame(rows, columns=VOCAB_COLUMNS)


VOCAB_COMPARISON_COLUMNS = [
    "model", "domain", "in_domain", "method", "label", "k", "coverage_corpus", "coverage_generations",
    "modeled_latency_reduction", "accept_length", "draft_ms_per_step", "measured_tokens_per_s",
    *_bounded("measured_latency_s"), *_bounded("measured_speedup_vs_full"), *_bounded("measured_speedup_vs_plain"),
    *_bounded("measured_speedup_vs_pruned"), "same_as_plain", "prompts",
    "k_stability_mean", "k_stability_min", "k_stability_max", "k_stability_jaccard"]


def table_vocab_comparison(records: Sequence[JobRecord]) -> pd.DataFrame:
    """The vocabulary paper's comparison (`vocab_comparison`), one row per head and domain: plain
    decoding, the full head, fixed top-k heads, the full head pruned at TPE's k and the head trained
    at k, every row timed side by side on the domain's test prompts; in or out of domain as the
    corpus says; the stability of k over corpus subsets on every row of its domain."""
    rows = []
    groups = latest([r for r in records if r.summary.get("vocab_comparison")], "model", "domain")
    for (model, domain), record in sorted(groups.items(), key=lambda i: tuple(map(str, i[0]))):
        s = record.summary
        comparison = s["vocab_comparison"]
        in_domain = (s.get("vocab_corpus") or {}).get("in_domain")
        stability = comparison.get("stability") or {}
        for row in comparison["rows"]:
            rows.append({
                "model": model, "domain": domain,
                "in_domain": {True: "in domain", False: "out of domain", None: "unknown"}[in_domain],
                **{key: row[key] for key in ("method", "label", "k", "coverage_corpus", "coverage_generations",
                                             "modeled_latency_reduction", "accept_length", "draft_ms_per_step",
                                             "measured_tokens_per_s", "same_as_plain")},
                **_with_bounds("measured_latency_s", row["measured_latency_s"]),
                **_with_bounds("measured_speedup_vs_full", row["measured_speedup_vs_full"]),
                **_with_bounds("measured_speedup_vs_plain", row["measured_speedup_vs_plain"]),
                **_with_bounds("measured_speedup_vs_pruned", row.get("measured_speedup_vs_pruned")),  # absent before
                "prompts": comparison["prompts"], "k_stability_mean": stability.get("k_mean"),
                "k_stability_min": stability.get("k_min"), "k_stability_max": stability.get("k_max"),
                "k_stability_jaccard": stability.get("jaccard_mean"),
            })
    return pd.DataFrame(rows, columns=VOCAB_COMPARISON_COLUMNS)


def slim_vocab_comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """The comparison as the paper lays it out: one line per head, intervals in brackets."""
    return pd.DataFrame({
        "domain": frame["domain"], "head": frame["label"], "k": frame["k"].astype("Int64"),
        "C(k) corpus": frame["coverage_corpus"], "C(k) target replies": frame["coverage_generations"],
        "R(k) modeled": frame["modeled_latency_reduction"], "accept length": frame["accept_length"],
        "draft ms/step": frame["draft_ms_per_step"], "measured tok/s": frame["measured_tokens_per_s"],
        "latency s [95% CI]": [_cell(r, "measured_latency_s", 3) for _, r in frame.iterrows()],
        "vs full [95% CI]": [_cell(r, "measured_speedup_vs_full", 2, "x") for _, r in frame.iterrows()],
        "vs plain [95% CI]": [_cell(r, "measured_speedup_vs_plain", 2, "x") for _, r in frame.iterrows()],
        "vs pruned at k [95% CI]": [_cell(r, "measured_speedup_vs_pruned", 2, "x") for _, r in frame.iterrows()],
        "replies = plain": [f"{a}/{b}" for a, b in zip(frame["same_as_plain"], frame["prompts"])],
    })


def _cell(row: pd.Series, name: str, digits: int, suffix: str = "") -> str:
    """"point [low-high]" of a bounded column (just the point without bounds; "n/a" without it)."""
    point, low, high = (row.get(c) for c in _bounded(name))
    if point is None or pd.isna(point):
        return NA
    text = f"{point:.{digits}f}{suffix}"
    if low is not None and high is not None and not (pd.isna(low) or pd.isna(high)):
        text += f" [{low:.{digits}f}-{high:.{digits}f}]"
    return text


def _pair(native: str, tss: str) -> str:
    return native if native == tss == NA else f"{native} -> {tss}"


def slim_table1(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 1 in the paper's layout: per domain, native -> TSS accept length, metric (0-100, named)
    and measured tokens/s, the measured speedup with its 95% interval, the share of layers skipped and
    the held-out verdict (intervals of A and M are in the CSV)."""
    rows = []
    for _, r in frame.iterrows():
        metric = _pair(format_cell("metric", r["metric_native"]), format_cell("metric", r["metric_tss"]))
        rows.append({
            "model": r["model"], "method": r["method"], "domain": r["domain"],
            "A": _pair(format_cell("accept", r["accept_native"]), format_cell("accept", r["accept_tss"])),
            "metric (0-100)": metric if pd.isna(r["metric_name"]) or r["metric_name"] is None
            else f"{r['metric_name']} {metric}",
            "measured tok/s": _pair(format_cell("measured_tokens_per_s", r["measured_tokens_per_s_native"]),
                                    format_cell("measured_tokens_per_s", r["measured_tokens_per_s_tss"])),
            "measured speedup [95% CI]": _cell(r, "measured_speedup", 2, "x"),
            "skipped": format_cell("skipped_ratio", r["skipped_ratio"]),
            "verdict": r["verdict"] if isinstance(r["verdict"], str) else NA,
        })
    return pd.DataFrame(rows, columns=["model", "method", "domain", "A", "metric (0-100)", "measured tok/s",
                                       "measured speedup [95% CI]", "skipped", "verdict"])


def slim_table2(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 2's readable view: per domain and strategy, the pick, A, M and the measured speedup with
    95% intervals, the verdict and the configurations measured."""
    rows = []
    for _, r in frame.iterrows():
        metric = _cell(r, "metric", 1)
        rows.append({
            "model": r["model"], "domain": r["domain"], "strategy": r["strategy"], "pick": r["selected_skip_layers"],
            "A [95% CI]": _cell(r, "accept", 2),
            "metric (0-100) [95% CI]": metric if metric == NA or not isinstance(r["metric_name"], str)
            else f"{r['metric_name']} {metric}",
            "measured speedup [95% CI]": _cell(r, "measured_speedup", 2, "x"),
            "verdict": r["verdict"] if isinstance(r["verdict"], str) else NA,
            "configurations": r["configurations"],
        })
    return pd.DataFrame(rows, columns=["model", "domain", "strategy", "pick", "A [95% CI]", "metric (0-100) [95% CI]",
                                       "measured speedup [95% CI]", "verdict", "configurations"])


# -- formatting ------------------------------------------------------------------------------------
DIGITS = (("accept", 2), ("speedup", 2), ("metric", 1), ("fidelity", 1), ("tokens_per_s", 1), ("ms_per_token", 2),
          ("wall_time", 1))  # by the first of these a column's name contains; 3 otherwise


def format_cell(column: str, value: Any) -> str:
    """Text of one cell: None / NaN -> "n/a" (never 0), floats rounded per column, speedups with "x"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    if isinstance(value, float):
        digits = next((d for key, d in DIGITS if key in column), 3)
        return f"{value:.{digits}f}" + ("x" if "speedup" in column else "")
    return str(value)


def _text_rows(frame: pd.DataFrame) -> list[list[str]]:
    return [[format_cell(c, v) for c, v in zip(frame.columns, row)] for row in frame.astype(object).values.tolist()]


def to_markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cells) + " |" for cells in _text_rows(frame)]
    return "\n".join([header, rule, *body]) + "\n"


_LATEX = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
          "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX.get(ch, ch) for ch in text)


def to_latex(frame: pd.DataFrame, caption: str = "") -> str:
    align = "".join("r" if pd.api.types.is_numeric_dtype(frame[c]) else "l" for c in frame.columns)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(_latex_escape(c) for c in frame.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(_latex_escape(cell) for cell in cells) + r" \\" for cells in _text_rows(frame)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines.append(rf"\caption{{{_latex_escape(caption)}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def to_csv(frame: pd.DataFrame) -> str:
    """Numbers as numbers, an empty cell where a value does not exist."""
    return frame.to_csv(index=False)


def write_table(frame: pd.DataFrame, base: Path, caption: str = "", view: pd.DataFrame | None = None) -> list[Path]:
    """<base>.csv (the full numeric frame) and <base>.md, <base>.tex (`view`, a readable layout of it,
    or the frame itself)."""
    shown = frame if view is None else view
    return [
        atomic_write_text(base.with_suffix(".md"), to_markdown(shown)),
        atomic_write_text(base.with_suffix(".tex"), to_latex(shown, caption)),
        atomic_write_text(base.with_suffix(".csv"), to_csv(frame)),
    ]


def merged_config_map(records: Sequence[JobRecord], strategy: str = "bfs") -> ConfigMap:
    """One config map over every domain: each domain's latest `strategy` job, else its latest job.
    Trimmed draft vocabularies travel inside the per-domain entries (`draft_vocab_ids`)."""
    jobs = [r for r in tss_jobs([r for r in records if r.directory is not None], strategy).values()]
    if not jobs:
        raise ReportError("no job folder with a config map to merge")
    try:
        return merge_config_maps([load_config_map(r.directory / "config_map.yaml") for r in jobs])
    except ConfigMapError as err:
        raise ReportError(str(err)) from None


ROUTING_COLUMNS = ["domain", "test_prompts", "routed_right", "accuracy", "accuracy_ci", "most_confused_with"]


def routing_table(records: Sequence[JobRecord], merged: ConfigMap, strategy: str = "bfs") -> pd.DataFrame:
    """Held-out routing accuracy of the runtime's default router: TF-IDF fitted on the calibration
    prompts the merged config map records (`map_routing_prompts`), scored on each mapped job's test
    split; a last "all" row pools them."""
    router = make_router("tfidf").fit(map_routing_prompts(merged))
    rows, hits_all = [], []
    for domain, test in mapped_test_splits(records, merged, strategy).items():
        predicted = [router.predict("\n\n".join(ex.turns))[0] for ex in test]
        hits = [p == domain for p in predicted]
        hits_all += hits
        wrong = Counter(p for p in predicted if p != domain).most_common(1)
        rows.append(_routing_row(domain, hits, f"{wrong[0][0]} ({wrong[0][1]})" if wrong else None))
    if len(rows) > 1:
        rows.append(_routing_row("all", hits_all, None))
    return pd.DataFrame(rows, columns=ROUTING_COLUMNS)


def mapped_test_splits(records: Sequence[JobRecord], merged: ConfigMap, strategy: str = "bfs") -> dict[str, list]:
    """{domain: its job's held-out test examples} for each domain of the merged map."""
    splits = {}
    for (_, domain), record in sorted(tss_jobs(records, strategy).items()):
        spec = (record.reproduce.get("evaluation_spec") or {}).get("domain")
        if domain in merged.domains and spec:
            splits[domain] = DomainSpec(**{**spec, "exclude_ids": tuple(spec.get("exclude_ids") or ())}).load("test")
    return splits


def mixed_stream_row(records: Sequence[JobRecord], merged: ConfigMap, per_domain: int, strategy: str = "bfs",
                     progress: bool = True) -> dict[str, Any]:
    """Table 1's mixed-stream row: `per_domain` test prompts of every mapped domain through the
    runtime controller (the default router, fitted on the map's calibration prompts) against dense,
    timed side by side now, with the model, drafter and generation settings of the jobs."""
    jobs = [r for (_, domain), r in tss_jobs(records, strategy).items() if domain in merged.domains]
    settings = {json.dumps({k: (r.reproduce.get("evaluation_spec") or {}).get(k) for k in
                            ("model", "dtype", "device", "drafter", "generation")}, sort_keys=True) for r in jobs}
    if len(settings) != 1:
        raise ReportError("--mixed-stream needs jobs of one model, drafter and generation setting; "
                          f"these jobs have {len(settings)}: pass the folders of one sweep")
    spec = json.loads(settings.pop())
    if spec["model"] is None:
        raise ReportError("--mixed-stream needs the jobs' reproduce.json (their folders, not bare summaries)")
    target = load_model_cached(spec["model"], spec["dtype"], spec["device"])
    drafter = Component(spec["drafter"]["target"], spec["drafter"]["options"])
    controller = Controller(target, merged, lambda t, ids: drafter.cls.from_target(t, vocab_ids=ids, **drafter.options),
                            make_router("tfidf").fit(map_routing_prompts(merged)))
    stream = round_robin(mapped_test_splits(records, merged, strategy), per_domain)
    result = run_mixed_stream(controller, stream, GenerationConfig(**spec["generation"]), progress)
    return {
        "model": jobs[0].model, "method": jobs[0].drafter, "domain": "mixed stream", "strategy": "controller",
        "split": "test", "accept_native": result.accept_dense, "accept_tss": result.accept_controller,
        "measured_tokens_per_s_native": result.timing.tokens_per_s[0],
        "measured_tokens_per_s_tss": result.timing.tokens_per_s[1],
        **_with_bounds("measured_speedup", result.timing.speedup("controller", "dense")),
        "verdict": f"{result.requests} requests, routed right {result.routed_right}, ran sparse {result.ran_sparse}",
    }


def _routing_row(domain: str, hits: list[bool], confused: str | None) -> dict[str, Any]:
    accuracy = mean_interval(hits)
    return {"domain": domain, "test_prompts": len(hits), "routed_right": sum(hits), "accuracy": accuracy.point,
            "accuracy_ci": f"{accuracy.low:.3f}-{accuracy.high:.3f}", "most_confused_with": confused}


# -- everything ------------------------------------------------------------------------------------
def build_report(
    records: Sequence[JobRecord],
    out_dir: str | os.PathLike,
    stores: Iterable[str | os.PathLike] = (),
    strategy: str = "bfs",
    merge_config_map: str | os.PathLike | None = None,
    plots: bool = True,
    mixed_stream: int | None = None,
    progress: bool = True,
) -> dict[str, list[Path]]:
    """Write tables, figures, report.md and (optionally) the merged config map; returns what was written.
    mixed_stream: test prompts per domain for Table 1's mixed-stream row (runs the model now)."""
    if not records:
        raise ReportError("no finished jobs found (no summary.json): pass job or multirun folders")
    known = sorted({*STRATEGY_NAMES, *(r.strategy for r in records)})
    if strategy not in known:  # a known one that no job used falls back per domain (Table 1's strategy column)
        raise ReportError(f"--strategy {strategy}: not a search; give one of {', '.join(known)}")
    for store in stores:  # refused before anything is written; the jobs' own stores are read later
        if not Path(store).is_file():
            raise ReportError(f"--store {store}: no such results store file")
        ResultsStore(store).close()  # a damaged or foreign file: StoreError
    out = Path(out_dir)
    if any(p.exists() and not p.is_dir() for p in (out, *out.parents)):
        raise ReportError(f"--out {out}: a file is in the way; give a folder (created if missing)")
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[Path]] = {}
    t1, t2 = table1(records, strategy), table2(records)
    if mixed_stream:
        row = mixed_stream_row(records, merged_config_map(records, strategy), mixed_stream, strategy, progress)
        t1 = pd.concat([t1, pd.DataFrame([row], columns=TABLE1_COLUMNS)], ignore_index=True)
    written["table1"] = write_table(t1, out / "table1", "Native vs TSS per domain (held-out test split)", slim_table1(t1))
    written["table2"] = write_table(t2, out / "table2", "Search strategies per domain", slim_table2(t2))
    sections = ["# specsparse report", "", f"{len(records)} job(s). Metrics on 0-100; measured figures timed side "
                "by side within each job, modeled ones from the cost profile; table1.csv and table2.csv hold every "
                "column with its 95% interval (_low, _high).", "",
                "## Table 1: native vs TSS per domain", "", to_markdown(slim_table1(t1)),
                "## Table 2: search strategies per domain", "", to_markdown(slim_table2(t2))]
    vocab = table_vocab(records)
    if not vocab.empty:
        written["table_vocab"] = write_table(vocab, out / "table_vocab", "Draft vocabulary trimming, in and out of domain")
        sections += ["## Draft vocabulary trimming: in and out of domain", "", to_markdown(vocab)]
    compared = table_vocab_comparison(records)
    for where in ("in domain", "out of domain", "unknown"):
        part = compared[compared["in_domain"] == where]
        if part.empty:
            continue
        stem = "table_vocab_" + where.replace(" ", "_")
        written[stem] = write_table(part, out / stem, f"Draft heads {where}, timed side by side per domain",
                                    slim_vocab_comparison(part))
        stability = part.drop_duplicates("domain")
        sections += [f"## Draft heads {where}: full, fixed top-k, pruned at k, trained at k", "",
                     to_markdown(slim_vocab_comparison(part)), "",
                     "TPE's k over corpus subsets: " + "; ".join(
                         f"{r.domain} {format_cell('k', r.k_stability_mean)} [{r.k_stability_min}-{r.k_stability_max}], "
                         f"Jaccard {format_cell('jaccard', r.k_stability_jaccard)}"
                         for r in stability.itertuples() if r.k_stability_mean is not None), ""]
    if plots:
        written["pareto"] = []
        multiple_models = len({r.model for r in records}) > 1
        written["samples"] = []
        written["vocab_coverage"] = [
            plot_vocab_coverage(r.summary["info"], f"{r.domain}: coverage of {r.model}'s draft vocabulary",
                                out / f"vocab_coverage_{r.domain}.png")
            for r in latest([r for r in records if (r.summary.get("info") or {}).get("curve")], "domain").values()
        ]
        for (model, domain), record in tss_jobs(records, strategy).items():
            stem = f"{model}_{domain}" if multiple_models else domain
            frame = read_measurements(record.directory / "measurements.csv") if record.directory else None
            if frame is not None and not frame.empty:
                written["pareto"].append(plot_pareto(frame, f"{domain}: {record.strategy} on {model}",
                                                     out / f"pareto_{stem}.png"))
            samples = record.directory / "samples.jsonl" if record.directory else None
            if samples is not None and samples.is_file():
                frame = pd.read_json(samples, lines=True, dtype={"metric_dense": float, "metric_tss": float})
                written["samples"].append(plot_samples(frame, domain, out / f"samples_{stem}.png"))
        for key, heading in (("pareto", "Pareto fronts"), ("samples", "Per test prompt, dense vs TSS"),
                             ("vocab_coverage", "Draft vocabulary: coverage, modeled latency reduction and the objective vs k")):
            if written[key]:
                sections += [f"## {heading}", ""] + [f"![{p.stem}]({p.name})" for p in written[key]] + [""]
        stores = list(dict.fromkeys(
            [str(Path(s).resolve()) for s in stores]
            + [r.reproduce["store"] for r in records if r.reproduce.get("store")]
        ))
        figures = (("ablation", single_layer_ablation, "ablation_single_layer", plot_ablation,
                    "single-layer skips on {}", "Single-layer skip ablation"),
                   ("dense_accept", dense_accept_lengths, "dense_accept_length", plot_dense_accept,
                    "dense accept length on {}", "Dense accept length per domain and drafter"))
        for key, collect, stem, plot, title, heading in figures:  # from the stores, one figure per model
            frame = collect(stores)
            written[key] = []
            if frame.empty:
                continue
            written[key].append(atomic_write_text(out / f"{stem}.csv", to_csv(frame)))
            for model, rows in frame.groupby("model", sort=True):
                name = f"{stem}.png" if frame["model"].nunique() == 1 else f"{stem}_{model}.png"
                written[key].append(plot(rows, title.format(model), out / name))
            sections += [f"## {heading}", ""] + [f"![{p.stem}]({p.name})" for p in written[key] if p.suffix == ".png"] + [""]
    if merge_config_map is not None:
        merged = merged_config_map(records, strategy)
        paths = list(write_config_map(merge_config_map, merged))
        written["config_map"] = paths
        sections += ["## Merged config map", "", f"{paths[0]} ({', '.join(merged.domains)})", ""]
        routing = routing_table(records, merged, strategy)
        if not routing.empty:
            written["routing"] = write_table(routing, out / "routing", "Routing accuracy on the held-out test prompts")
            sections += ["## Routing on held-out prompts (router fitted on the map's calibration prompts)", "",
                         to_markdown(routing)]
    written["report"] = [atomic_write_text(out / "report.md", "\n".join(sections))]
    return written
