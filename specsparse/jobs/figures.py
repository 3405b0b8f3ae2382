"""The report's Pareto figure (PNG, matplotlib without pyplot); the single-layer ablation's figure is
in `specsparse.jobs.ablation`."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd


def new_figure(width: float = 6.0, height: float = 4.5):
    from matplotlib.figure import Figure  # noqa: PLC0415 - no pyplot: no GUI backend, thread-safe

    return Figure(figsize=(width, height), dpi=120)


def plot_pareto(frame: pd.DataFrame, title: str, path: str | os.PathLike) -> Path:
    """Scatter of one search's configurations: accept length vs metric, cost as colour; Pareto points
    ringed, the selected configuration a red star, dense a black square. Without a metric (domain
    without references) the y axis is the cost instead."""
    data = frame[~frame["early_stopped"]] if "early_stopped" in frame else frame
    fig = new_figure()
    ax = fig.subplots()
    has_metric = data["metric"].notna().any()
    y_column, y_label = ("metric", "task metric M") if has_metric else ("cost", "cost (s / token; metric n/a)")
    points = ax.scatter(data["accept_length"], data[y_column], c=data["cost"] * 1000, cmap="viridis", s=28, zorder=2)
    fig.colorbar(points, ax=ax, label="cost (ms / token)")
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
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
