"""The report's figures (PNG, matplotlib without pyplot): the Pareto front of a search, the dense accept
length per domain and drafter (the papers' Fig. 2) and per-sample dense vs TSS (Fig. 5); the
single-layer ablation's figure (Fig. 3) is in `specsparse.reporting.ablation`; and a vocabulary search's
coverage against k."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from specsparse.types import recorded_class_path


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


def dense_accept_lengths(stores: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """The papers' Fig. 2 data: the dense target's accept length per (model, drafter, domain), from the
    stored dense measurements of the calibration splits (the latest when a setting was measured
    several times, e.g. with other generation settings)."""
    from specsparse.study.store import ResultsStore  # noqa: PLC0415 - figures stay importable without sqlite work

    latest: dict[tuple[str, str, str], dict] = {}
    for store_path in stores:
        if not Path(store_path).is_file():
            continue
        with ResultsStore(store_path) as store:
            rows = store.rows(split="calibration", early_stopped=False)
        for row in rows:
            if row.get("candidate.skip_layers") != () or row.get("candidate.vocab_size") is not None:
                continue
            drafter = str(recorded_class_path(row, "drafter.") or "").rsplit(".", 1)[-1]
            key = (str(row.get("model")), drafter, str(row.get("domain.name")))
            if key not in latest or row["created"] >= latest[key]["created"]:
                latest[key] = row
    out = [{"model": m, "drafter": d, "domain": domain, "accept_length": row["accept_length"],
            "prompts": len(row.get("example_ids") or ())}
           for (m, d, domain), row in sorted(latest.items())]
    return pd.DataFrame(out, columns=["model", "drafter", "domain", "accept_length", "prompts"])


def plot_dense_accept(frame: pd.DataFrame, title: str, path: str | os.PathLike) -> Path:
    """Grouped bars: the dense target's accept length per domain, one bar per drafter (Fig. 2)."""
    fig = new_figure(7.0, 4.0)
    ax = fig.subplots()
    domains = sorted(frame["domain"].unique())
    drafters = sorted(frame["drafter"].unique())
    width = 0.8 / max(len(drafters), 1)
    for i, drafter in enumerate(drafters):
        rows = frame[frame["drafter"] == drafter].set_index("domain")
        heights = [rows["accept_length"].get(d, float("nan")) for d in domains]
        ax.bar([x + i * width for x in range(len(domains))], heights, width, label=drafter)
    ax.set_xticks([x + width * (len(drafters) - 1) / 2 for x in range(len(domains))], domains, rotation=20)
    ax.axhline(1.0, color="black", lw=0.8)  # plain decoding
    ax.set_ylabel("dense accept length (tokens per verification)")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_samples(frame: pd.DataFrame, title: str, path: str | os.PathLike) -> Path:
    """Per test prompt, dense against the selection (Fig. 5): accept length, and the metric where the
    domain has one; points above the diagonal improved."""
    panels = [("accept", "accept length")] + ([("metric", "task metric")] if frame["metric_dense"].notna().any() else [])
    fig = new_figure(4.2 * len(panels), 4.0)
    for ax, (column, label) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        x, y = frame[f"{column}_dense"], frame[f"{column}_tss"]
        ax.scatter(x, y, s=16, alpha=0.7)
        low, high = min(x.min(), y.min()), max(x.max(), y.max())
        ax.plot([low, high], [low, high], color="black", lw=0.8)
        ax.set_xlabel(f"{label}, dense")
        ax.set_ylabel(f"{label}, TSS")
        ax.set_title(f"{title}: {label} ({len(frame)} prompts)", fontsize=9)
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_vocab_coverage(info: dict, title: str, path: str | os.PathLike) -> Path:
    """C(k), R(k) and TPE's objective alpha C(k) + (1 - alpha) R(k) of a vocabulary search against k
    (log scale), the minimum coverage and the chosen k."""
    curve = np.array(info["curve"], dtype=float)  # rows (k, coverage, latency reduction)
    fig = new_figure()
    ax = fig.subplots()
    ax.plot(curve[:, 0], curve[:, 1], label="coverage C(k)")
    ax.plot(curve[:, 0], curve[:, 2], label="modeled latency reduction R(k)")
    alpha = info["alpha"]
    ax.plot(curve[:, 0], alpha * curve[:, 1] + (1 - alpha) * curve[:, 2], ls=":", color="black",
            label=f"objective {alpha:g} C + {1 - alpha:g} R")
    ax.axhline(info["min_coverage"], color="grey", ls="--", lw=0.8, label=f"minimum coverage {info['min_coverage']}")
    ax.axvline(info["k"], color="black", lw=0.8, label=f"chosen k = {info['k']} (C = {info['coverage']:.3f})")
    ax.set_xscale("log")
    ax.set_xlabel("draft vocabulary size k")
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
