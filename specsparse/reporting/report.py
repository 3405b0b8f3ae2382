"""The paper's tables and figures, rebuilt from job outputs and the results store (or W&B runs).

    records = find_jobs(["outputs/multirun/2025-01-01_10-00-00"])   # every summary.json below
    paths = build_report(records, out_dir="outputs/report", stores=["outputs/store.sqlite"])

The tables (`specsparse.reporting.tables`: Table 1, native vs TSS per domain; Table 2, the search
strategies; the vocabulary tables) are each written as Markdown, LaTeX and CSV and shown in report.md.
Figures (PNG): the Pareto front per domain (A vs M, cost as colour, selected configuration marked) from
the job's measurements.csv, per test prompt dense vs TSS (Fig. 5) from its samples.jsonl, the
single-layer skip ablation (change in A and M per skipped layer, per domain; Fig. 3) and the dense
accept length per domain and drafter (Fig. 2) from the store's measurements. With `merge_config_map`,
the jobs' domain config maps are joined into the one multi-domain map the runtime controller reads,
and its router is scored on the held-out prompts.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from specsparse.config_map import ConfigMap, serving_plan, write_config_map
from specsparse.jobs.figures import plot_pareto, read_measurements
from specsparse.jobs.result import with_interval_lists
from specsparse.old_formats import current_reproduce, current_summary
from specsparse.reporting.ablation import plot_ablation, single_layer_ablation
from specsparse.reporting.figures import (
    dense_accept_lengths,
    plot_dense_accept,
    plot_samples,
    plot_vocab_coverage,
)
from specsparse.reporting.formatting import (
    format_cell,
    slim_table1,
    slim_table2,
    slim_vocab_comparison,
    to_csv,
    to_markdown,
    write_table,
)
from specsparse.reporting.records import JobRecord, ReportError, checked_summary, latest, tss_jobs
from specsparse.reporting.tables import (
    IN_DOMAIN,
    TABLE1_COLUMNS,
    merged_config_map,
    mixed_stream_row,
    routing_table,
    table1,
    table2,
    table_vocab,
    table_vocab_comparison,
)
from specsparse.search import STRATEGY_NAMES
from specsparse.study.store import ResultsStore
from specsparse.util import atomic_write_text, first_line, folder_problem, strict_json


# -- finding jobs ----------------------------------------------------------------------------------
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
        records.append(JobRecord(checked_summary(current_summary(summary), str(file)), file.parent,
                                 current_reproduce(reproduce) if isinstance(reproduce, dict) else {}))
    return sorted(records, key=lambda r: r.order)


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ReportError(f"{file}: unreadable ({first_line(err)}): rerun its job, or leave its folder out") from None


log = logging.getLogger(__name__)


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
        summary = checked_summary(current_summary(with_interval_lists(json.loads(strict_json(summary)))),
                                  f"W&B run {run.path}")
        reproduce = {"model": summary.get("model"), "num_layers": summary.get("num_layers"),
                     "finished": str(run.created_at)}
        records.append(JobRecord(summary, None, reproduce, source=f"wandb:{run.path}"))
    return sorted(records, key=lambda r: r.order)


# -- what the report holds -------------------------------------------------------------------------
@dataclass(frozen=True)
class ReportTable:
    """One table of the report: <name>.csv holds the full frame `build(records, strategy)` makes,
    <name>.md / .tex and report.md's section under `heading` its `view` (the frame itself when None);
    `caption` is the LaTeX caption, `note` a line report.md adds after the table. Empty: left out."""

    name: str
    build: Callable[[Sequence[JobRecord], str], pd.DataFrame]
    heading: str
    caption: str
    view: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    note: Callable[[pd.DataFrame], str] | None = None


def _k_stability(comparison: pd.DataFrame) -> str:
    return "TPE's k over corpus subsets: " + "; ".join(
        f"{r.domain} {format_cell('k', r.k_stability_mean)} [{r.k_stability_min}-{r.k_stability_max}], "
        f"Jaccard {format_cell('jaccard', r.k_stability_jaccard)}"
        for r in comparison.drop_duplicates("domain").itertuples() if r.k_stability_mean is not None)


def _vocab_comparison(where: str) -> ReportTable:
    return ReportTable("table_vocab_" + where.replace(" ", "_"),
                       lambda records, _: table_vocab_comparison(records, where),
                       f"Draft heads {where}: full, fixed top-k, pruned at k, trained at k",
                       f"Draft heads {where}, timed side by side per domain", slim_vocab_comparison, _k_stability)


def _routing(merged: ConfigMap) -> ReportTable:
    return ReportTable("routing", lambda records, strategy: routing_table(records, merged, strategy),
                       "Routing on held-out prompts (router fitted on the map's calibration prompts)",
                       "Routing accuracy on the held-out test prompts")


TABLES = (  # in report.md's order; `_routing` follows the merged config map
    ReportTable("table1", table1, "Table 1: native vs TSS per domain",
                "Native vs TSS per domain (held-out test split)", slim_table1),
    ReportTable("table2", lambda records, _: table2(records), "Table 2: search strategies per domain",
                "Search strategies per domain", slim_table2),
    ReportTable("table_vocab", lambda records, _: table_vocab(records), "Draft vocabulary trimming: in and out of domain",
                "Draft vocabulary trimming, in and out of domain"),
    *(_vocab_comparison(where) for where in IN_DOMAIN.values()),
)
STORE_FIGURES = (  # (key, collect(stores), file stem, plot, title per model, heading): one figure per model
    ("ablation", single_layer_ablation, "ablation_single_layer", plot_ablation, "single-layer skips on {}",
     "Single-layer skip ablation"),
    ("dense_accept", dense_accept_lengths, "dense_accept_length", plot_dense_accept, "dense accept length on {}",
     "Dense accept length per domain and drafter"),
)
INTRO = ["# specsparse report", "", "{} job(s). Metrics on 0-100; measured figures timed side by side within each "
         "job, modeled ones from the cost profile; table1.csv and table2.csv hold every column with its 95% "
         "interval (_low, _high).", ""]


# -- writing it ------------------------------------------------------------------------------------
def build_report(
    records: Sequence[JobRecord],
    out_dir: str | os.PathLike,
    stores: Iterable[str | os.PathLike] = (),
    strategy: str = "bfs",
    merge_config_map: str | os.PathLike | None = None,
    plots: bool = True,
    mixed_stream: int | None = None,
    progress: bool = True,
    serve_inconclusive: bool = False,
) -> dict[str, list[Path]]:
    """Write tables, figures, report.md and (optionally) the merged config map; returns what was written.
    mixed_stream: test prompts per domain for Table 1's mixed-stream row (runs the model now), routed
    as serving routes the merged map (held picks only unless `serve_inconclusive`)."""
    out = _checked_out_dir(records, out_dir, stores, strategy)
    store_frames = _store_frames(records, stores) if plots else {}  # a damaged row stops here, before any file
    frames = {table.name: table.build(records, strategy) for table in TABLES}
    out.mkdir(parents=True, exist_ok=True)
    if mixed_stream:
        row = mixed_stream_row(records, merged_config_map(records, strategy), mixed_stream, strategy, progress,
                               serve_inconclusive)
        frames["table1"] = pd.concat([frames["table1"], pd.DataFrame([row], columns=TABLE1_COLUMNS)], ignore_index=True)
    written: dict[str, list[Path]] = {}
    sections = [line.format(len(records)) for line in INTRO]
    for table in TABLES:
        sections += _write_table(table, frames[table.name], out, written)
    if plots:
        sections += _job_figures(records, strategy, out, written)
        sections += _store_figures(store_frames, out, written)
    if merge_config_map is not None:
        merged = merged_config_map(records, strategy)
        paths = list(write_config_map(merge_config_map, merged))
        written["config_map"] = paths
        served = serving_plan(merged, serve_inconclusive)[1]
        sections += ["## Merged config map", "", f"{paths[0]} ({', '.join(merged.domains)}); served as:", "",
                     *(f"- {line}" for line in served), ""]
        routing = _routing(merged)
        sections += _write_table(routing, routing.build(records, strategy), out, written)
    written["report"] = [atomic_write_text(out / "report.md", "\n".join(sections))]
    return written


def _checked_out_dir(records: Sequence[JobRecord], out_dir: str | os.PathLike, stores: Iterable[str | os.PathLike],
                     strategy: str) -> Path:
    """The report's folder, once the inputs are known to fit: refused before anything is written."""
    if not records:
        raise ReportError("no finished jobs found (no summary.json): pass job or multirun folders")
    known = sorted({*STRATEGY_NAMES, *(r.strategy for r in records)})
    if strategy not in known:  # a known one that no job used falls back per domain (Table 1's strategy column)
        raise ReportError(f"--strategy {strategy}: not a search; give one of {', '.join(known)}")
    for store in stores:  # the jobs' own stores are read later
        if not Path(store).is_file():
            raise ReportError(f"--store {store}: no such results store file")
        ResultsStore(store).close()  # a damaged or foreign file: StoreError
    out = Path(out_dir)
    if (problem := folder_problem(out)) is not None:
        raise ReportError(f"--out {out}: {problem}; give a folder you can write (created if missing)")
    return out


def _write_table(table: ReportTable, frame: pd.DataFrame, out: Path, written: dict[str, list[Path]]) -> list[str]:
    """Write `table`'s files (none when `frame` is empty) into `written`; returns its report.md lines."""
    if frame.empty:
        return []
    shown = frame if table.view is None else table.view(frame)
    written[table.name] = write_table(frame, out / table.name, table.caption, shown)
    lines = [f"## {table.heading}", "", to_markdown(shown)]
    return lines if table.note is None else [*lines, "", table.note(frame), ""]


def _figure_section(heading: str, paths: list[Path]) -> list[str]:
    return [f"## {heading}", ""] + [f"![{p.stem}]({p.name})" for p in paths if p.suffix == ".png"] + [""]


def _job_figures(records: Sequence[JobRecord], strategy: str, out: Path, written: dict[str, list[Path]]) -> list[str]:
    """Figures from the jobs' folders: Pareto fronts, per-prompt samples and draft vocabulary coverage."""
    written["pareto"], written["samples"] = [], []
    written["vocab_coverage"] = [
        plot_vocab_coverage(r.summary["info"], f"{r.domain}: coverage of {r.model}'s draft vocabulary",
                            out / f"vocab_coverage_{r.domain}.png")
        for r in latest([r for r in records if (r.summary.get("info") or {}).get("curve")], "domain").values()
    ]
    multiple_models = len({r.model for r in records}) > 1
    for (model, domain), record in tss_jobs(records, strategy).items():
        stem = f"{model}_{domain}" if multiple_models else domain
        frame = read_measurements(record.directory / "measurements.csv") if record.directory else None
        if frame is not None and not frame.empty:
            written["pareto"].append(plot_pareto(frame, f"{domain}: {record.strategy} on {model}",
                                                 out / f"pareto_{stem}.png"))
        samples = record.directory / "samples.jsonl" if record.directory else None
        if samples is not None and samples.is_file():
            frame = pd.read_json(samples, lines=True, dtype={"metric_dense": float, "metric_tss": float})
            metric_name = (record.summary.get("metric") or {}).get("name") or "task metric"
            written["samples"].append(plot_samples(frame, domain, out / f"samples_{stem}.png", metric_name))
    sections = []
    for key, heading in (("pareto", "Pareto fronts"), ("samples", "Per test prompt, dense vs TSS"),
                         ("vocab_coverage", "Draft vocabulary: coverage, modeled latency reduction and the objective vs k")):
        if written[key]:
            sections += _figure_section(heading, written[key])
    return sections


def _store_frames(records: Sequence[JobRecord], stores: Iterable[str | os.PathLike]) -> dict[str, pd.DataFrame]:
    """The data of each of `STORE_FIGURES` from the given stores and the jobs' own (a job's store that is
    gone is left out, with a warning; a damaged row is a StoreError)."""
    named = [str(Path(s).resolve()) for s in stores]
    own = list(dict.fromkeys(r.reproduce["store"] for r in records if r.reproduce.get("store")))
    for path in own:
        if not Path(path).is_file():
            log.warning("report: results store %s (named by the jobs' reproduce.json) is gone: the store's figures "
                        "leave it out (pass it with --store where it moved)", path)
    paths = list(dict.fromkeys(named + [p for p in own if Path(p).is_file()]))
    return {key: collect(paths) for key, collect, *_ in STORE_FIGURES}


def _store_figures(frames: dict[str, pd.DataFrame], out: Path, written: dict[str, list[Path]]) -> list[str]:
    """`STORE_FIGURES` drawn from their data (`_store_frames`), each with its data as CSV."""
    sections = []
    for key, _, stem, plot, title, heading in STORE_FIGURES:
        frame = frames[key]
        written[key] = []
        if frame.empty:
            continue
        written[key].append(atomic_write_text(out / f"{stem}.csv", to_csv(frame)))
        for model, rows in frame.groupby("model", sort=True):
            name = f"{stem}.png" if frame["model"].nunique() == 1 else f"{stem}_{model}.png"
            written[key].append(plot(rows, title.format(model), out / name))
        sections += _figure_section(heading, written[key])
    return sections
