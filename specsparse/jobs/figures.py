"""A job's own figures, written into its folder by every job (W&B or not), from its summary.json and
measurements.csv: `speedup.png` (the measured speedups over plain decoding, with their 95% intervals) and
`pareto.png` (the search's configurations and its Pareto front). matplotlib without pyplot; the report's
figures (specsparse.reporting.figures) draw with the same helpers."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)


def new_figure(width: float = 6.0, height: float = 4.5):
    from matplotlib.figure import Figure  # noqa: PLC0415 - no pyplot: no GUI backend, thread-safe

    return Figure(figsize=(width, height), dpi=120)


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Lay out and write `fig` as a PNG at `path` (folders created)."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def plot_pareto(frame: pd.DataFrame, title: str, path: str | os.PathLike) -> Path:
    """Scatter of one search's configurations: accept length vs metric, modeled cost as colour; Pareto points
    ringed, the selected configuration a red star, dense a black square. Without a metric (domain
    without references) the y axis is the modeled cost instead."""
    data = frame[~frame["early_stopped"]] if "early_stopped" in frame else frame
    fig = new_figure()
    ax = fig.subplots()
    has_metric = data["metric"].notna().any()
    metric_name = data["metric_name"].dropna().iloc[0] if has_metric and "metric_name" in data else "task metric"
    y_column, y_label = (("metric", f"{metric_name} (0-100)") if has_metric
                         else ("modeled_cost", "modeled cost (s / token; metric n/a)"))
    points = ax.scatter(data["accept_length"], data[y_column], c=data["modeled_cost"] * 1000, cmap="viridis", s=28,
                        zorder=2)
    fig.colorbar(points, ax=ax, label="modeled cost (ms / token)")
    front = data[data["pareto"]] if "pareto" in data else data.iloc[0:0]
    ax.scatter(front["accept_length"], front[y_column], facecolors="none", edgecolors="black", s=90, linewidths=1.2,
               label="Pareto front (feasible)", zorder=3)
    dense = data[data["num_skipped"].eq(0) & data["vocab_size"].isna()] if "num_skipped" in data else data.iloc[0:0]
    ax.scatter(dense["accept_length"], dense[y_column], marker="s", color="black", s=50, label="dense", zorder=4)
    selected = data[data["selected"]] if "selected" in data else data.iloc[0:0]
    ax.scatter(selected["accept_length"], selected[y_column], marker="*", color="red", s=220, label="selected", zorder=5)
    for _, row in selected.iterrows():
        ax.annotate(row["label"], (row["accept_length"], row[y_column]), textcoords="offset points", xytext=(6, 6),
                    fontsize=8)
    ax.margins(x=0.12, y=0.08)  # room for the selected configuration's label
    ax.set_xlabel("accept length A (tokens per verification)")
    ax.set_ylabel(y_label)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return save_figure(fig, path)


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


def plot_speedup(summary: dict[str, Any], path: str | os.PathLike) -> Path | None:
    """The job's headline as a figure: dense speculation and the pick, each measured over plain decoding
    with its 95% interval, on the test split and (where a sweeper's objective or select=measured timed it)
    on the calibration split. None when nothing was timed."""
    rows = [(f"{which}, {split}", summary.get(key)) for split, keys in (
        ("calibration", (("selected", "measured_speedup_calibration_vs_plain"),)),
        ("test", (("dense", "measured_speedup_dense_vs_plain"), ("selected", "measured_speedup_test_vs_plain"))))
        for which, key in keys]
    rows = [(label, values) for label, values in rows if values]
    if not rows:
        return None
    pick = ",".join(map(str, summary.get("selected_skip_layers") or ())) or "dense"
    fig = new_figure(6.0, 1.2 + 0.55 * len(rows))
    ax = fig.subplots()
    for y, (label, (point, low, high)) in enumerate(rows):
        color = "tab:gray" if label.startswith("dense") else "tab:blue" if label.endswith("test") else "tab:orange"
        ax.errorbar(point, y, xerr=[[point - low], [high - point]], fmt="o", color=color, capsize=4)
        ax.annotate(f"{point:.2f}x [{low:.2f}-{high:.2f}]", (high, y), textcoords="offset points", xytext=(6, -3),
                    fontsize=8)
    ax.axvline(1.0, color="black", lw=0.8, ls="--")
    ax.set_yticks(range(len(rows)), [label.replace("selected", f"pick ({pick})") for label, _ in rows], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.margins(x=0.25)
    ax.set_xlabel("measured speedup over plain decoding (95% interval; 1 = plain)")
    ax.set_title(f"{summary.get('domain')} ({summary.get('strategy')})", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return save_figure(fig, path)


def write_job_figures(summary: dict[str, Any], output_dir: Path) -> list[Path]:
    """speedup.png and pareto.png in `output_dir` (what could be drawn); a figure that fails is logged, never
    fatal: the job's numbers are already written."""
    written = []
    try:
        written.append(plot_speedup(summary, output_dir / "speedup.png"))
        frame = read_measurements(output_dir / "measurements.csv")
        if frame is not None:
            written.append(plot_pareto(frame, f"{summary['domain']} ({summary['strategy']})", output_dir / "pareto.png"))
    except Exception as err:  # noqa: BLE001 - a figure never fails a finished job
        log.warning("job figures: %s", err)
    return [p for p in written if p is not None]


