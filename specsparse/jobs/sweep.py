"""A sweep (`python run.py -m ...`) runs every valid job and ends with one table of all of them.

Hydra loads `specsparse.cli.hydra_callbacks.SweepSummary` from conf/config.yaml (`hydra.callbacks`). At
the end of the multirun it reads every job folder's summary.json under the sweep folder (hydra.sweep.dir), prints one row per job
(`sweep_rows`) and writes them to sweep_summary.md and sweep_summary.csv in the sweep folder. Failed
jobs are rows with verdict "failed" and their error, and the sweep then exits 2. Everything comes from
the job folders (a failed job's reproduce.json holds its error, `record_failure`), so jobs that ran in
other processes or on other machines (`hydra/launcher=ray`) are counted alike.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsparse.old_formats import current_summary
from specsparse.util import atomic_write_text

NA = "n/a"
COLUMNS = ("job", "domain", "search", "skip_layers", "measured_speedup_vs_plain", "measured_speedup_vs_plain_low",
           "measured_speedup_vs_plain_high", "measured_speedup", "measured_speedup_low", "measured_speedup_high",
           "accept_dense", "accept_selected", "metric", "metric_dense", "metric_selected", "verdict", "error")


def sweep_rows(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """One row (COLUMNS) per job folder under `sweep_dir` (one with a summary.json or reproduce.json).
    Test split numbers; measured_speedup_vs_plain is the selected over plain decoding (the dense pick's
    when the search kept dense), measured_speedup the selected over dense, each with its 95% interval.
    A summary of an earlier version is read in this version's form (`specsparse.old_formats`); keys a
    summary lacks are None, the metric name "n/a"."""
    sweep = Path(sweep_dir)
    folders = {f.parent for name in ("summary.json", "reproduce.json") for f in sweep.rglob(name)
               if not {"wandb", "ray_tune"} & set(f.relative_to(sweep).parts)}
    rows = [_row(folder.relative_to(sweep).as_posix(), folder) for folder in folders]
    return sorted(rows, key=lambda r: _natural(r["job"]))


def record_failure(job_dir: Path, message: str, overrides: Sequence[str] = ()) -> None:
    """Write a failed job's error line into its reproduce.json (made when the job failed before writing
    one: a bad configuration), where `sweep_rows` finds it whichever process ran the job."""
    record = _read_json(job_dir / "reproduce.json") or {"overrides": list(overrides)}
    record.update(status="failed", error=message.removeprefix("error: "))
    atomic_write_text(job_dir / "reproduce.json", json.dumps(record, indent=1) + "\n")


def _row(job: str, folder: Path) -> dict[str, Any]:
    summary = current_summary(_read_json(folder / "summary.json"))
    reproduce = _read_json(folder / "reproduce.json")
    error = reproduce.get("error") if reproduce.get("status") == "failed" else None
    test = summary.get("test") or {}
    dense, selected = test.get("dense") or {}, test.get("selected") or {}
    metric = summary.get("metric")
    low, high = (summary.get("measured_speedup_test_interval") or [None, None])[:2]
    plain = summary.get("measured_speedup_test_vs_plain") or summary.get("measured_speedup_dense_vs_plain") or [None] * 3
    if reproduce.get("status") == "failed":
        verdict = "failed"
    elif summary:
        verdict = (summary.get("held_out") or {}).get("verdict") or NA
    else:  # neither finished nor failed: a job that was stopped
        verdict = f"no summary.json (status {reproduce.get('status', 'unknown')})"
    return {
        "job": job,
        "domain": summary.get("domain") or reproduce.get("domain"),
        "search": summary.get("strategy") or reproduce.get("search"),
        "skip_layers": summary.get("selected_skip_layers"),
        "measured_speedup_vs_plain": plain[0],
        "measured_speedup_vs_plain_low": plain[1],
        "measured_speedup_vs_plain_high": plain[2],
        "measured_speedup": summary.get("measured_speedup_test"),
        "measured_speedup_low": low,
        "measured_speedup_high": high,
        "accept_dense": dense.get("accept_length"),
        "accept_selected": selected.get("accept_length"),
        "metric": (metric.get("name") if isinstance(metric, dict) else None) or NA,
        "metric_dense": dense.get("metric"),
        "metric_selected": selected.get("metric"),
        "verdict": verdict,
        "error": error or "",
    }


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # missing, or cut short: the row shows what is there
        return {}
    return data if isinstance(data, dict) else {}


def _natural(name: str) -> list:
    """Sort key: job 10 after job 9."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table: measured speedups first (over plain decoding, then over dense),
    then accept length A and the metric M on the test split, dense -> selected."""
    def num(value: Any, digits: int) -> str:
        return NA if value is None else f"{value:.{digits}f}"

    def speedup(r: dict[str, Any], name: str) -> str:
        if r[name] is None:
            return NA
        text = f"{r[name]:.2f}x"
        if r[f"{name}_low"] is not None and r[f"{name}_high"] is not None:
            text += f" [{r[f'{name}_low']:.2f}-{r[f'{name}_high']:.2f}]"
        return text

    header = ["job", "domain", "search", "skip set", "vs plain [95% CI]", "vs dense [95% CI]", "A dense", "A selected",
              "metric (0-100)", "M dense", "M selected", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        verdict = f"{r['verdict']}: {r['error']}" if r["error"] else r["verdict"]
        cells = [r["job"], r["domain"] or NA, r["search"] or NA,
                 NA if r["skip_layers"] is None else str(r["skip_layers"]),
                 speedup(r, "measured_speedup_vs_plain"), speedup(r, "measured_speedup"),
                 num(r["accept_dense"], 2), num(r["accept_selected"], 2), r["metric"],
                 num(r["metric_dense"], 1), num(r["metric_selected"], 1), verdict]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({**r, "skip_layers": "" if r["skip_layers"] is None else json.dumps(r["skip_layers"])}
                     for r in rows)
    return buffer.getvalue()


def write_sweep_summary(sweep: Path) -> tuple[list[dict[str, Any]], str]:
    """The sweep's rows (`sweep_rows`) and their markdown table, written to sweep_summary.md and
    sweep_summary.csv in `sweep`."""
    rows = sweep_rows(sweep)
    markdown = to_markdown(rows)
    atomic_write_text(sweep / "sweep_summary.md", markdown)
    atomic_write_text(sweep / "sweep_summary.csv", to_csv(rows))
    return rows, markdown


