"""The single-layer skip ablation: how accept length and metric change when one layer is skipped,
per (model, domain), from the calibration measurements a BFS stores first, and its figure."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from specsparse.jobs.figures import new_figure, save_figure
from specsparse.metrics import SCALE
from specsparse.study.store import SCALAR_FIELDS, ResultsStore


def single_layer_ablation(stores: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Change in accept length and metric when one layer is skipped, per (model, domain).

    From calibration measurements in the store(s): within one description (same model, drafter,
    prompts, generation settings, ...), every single-layer skip is compared with the dense
    measurement. Per (model, domain) the description with the most single-layer measurements is used.
    """
    ignore = {"key", "created", "search", "early_stop_thresholds", "candidate.skip_layers", "candidate.vocab_size",
              *SCALAR_FIELDS}
    groups: dict[tuple, dict[str, Any]] = {}
    for store_path in stores:  # files that exist (`report._store_frames` leaves the rest out)
        with ResultsStore(store_path) as store:
            rows = store.rows(split="calibration")
        for row in rows:
            skip = row.get("candidate.skip_layers")
            if row.get("candidate.vocab_size") is not None or row.get("early_stopped") or skip is None or len(skip) > 1:
                continue
            description = tuple(sorted((k, v) for k, v in row.items() if k not in ignore and not k.startswith("meta.")))
            group = groups.setdefault(description, {"dense": None, "singles": {}, "row": row, "created": 0.0})
            group["created"] = max(group["created"], row["created"])
            if len(skip) == 0:
                group["dense"] = row
            else:
                group["singles"][skip[0]] = row
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for group in groups.values():
        if group["dense"] is None or not group["singles"]:
            continue
        row = group["row"]
        key = (str(row.get("model")), str(row.get("domain.name")))
        current = best.get(key)
        if current is None or (len(group["singles"]), group["created"]) > (len(current["singles"]), current["created"]):
            best[key] = group
    out = []
    for (model, domain), group in sorted(best.items()):
        dense = group["dense"]
        for layer, row in sorted(group["singles"].items()):
            metric, metric0 = (None if m is None else SCALE * m for m in (row.get("metric"), dense.get("metric")))
            out.append({
                "model": model,
                "domain": domain,
                "layer": layer,
                "accept_length": row["accept_length"],
                "metric": metric,
                "dense_accept_length": dense["accept_length"],
                "dense_metric": metric0,
                "delta_accept": row["accept_length"] - dense["accept_length"],
                "delta_metric": None if metric is None or metric0 is None else metric - metric0,
            })
    return pd.DataFrame(out, columns=["model", "domain", "layer", "accept_length", "metric", "dense_accept_length",
                                      "dense_metric", "delta_accept", "delta_metric"])


def plot_ablation(frame: pd.DataFrame, title: str, path: str | os.PathLike) -> Path:
    """Two panels: change in accept length and in metric per skipped layer, one line per domain."""
    fig = new_figure(7.5, 6.0)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for domain, rows in frame.groupby("domain", sort=True):
        top.plot(rows["layer"], rows["delta_accept"], marker="o", ms=3, label=domain)
        metric = rows.dropna(subset=["delta_metric"])
        if len(metric):
            bottom.plot(metric["layer"], metric["delta_metric"], marker="o", ms=3, label=domain)
    for ax, label in ((top, "Δ accept length"), (bottom, "Δ metric, 0-100 (n/a domains omitted)")):
        ax.axhline(0, color="black", lw=0.8)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel("skipped layer")
    top.legend(fontsize=8, ncol=2)
    top.set_title(title)
    return save_figure(fig, path)


# -- config maps -----------------------------------------------------------------------------------
