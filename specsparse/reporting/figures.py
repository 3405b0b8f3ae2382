"""The report's figures (PNG, matplotlib without pyplot; a job's own Pareto and speedup figures are
`specsparse.jobs.figures`): the dense accept
length per domain and drafter (the papers' Fig. 2) and per-sample dense vs TSS (Fig. 5); the
single-layer ablation's figure (Fig. 3) is in `specsparse.reporting.ablation`; and a vocabulary search's
coverage against k."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from specsparse.jobs.figures import new_figure, save_figure


def dense_accept_lengths(stores: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """The papers' Fig. 2 data: the dense target's accept length per (model, drafter, domain), from the
    stored dense measurements of the calibration splits (the latest when a setting was measured
    several times, e.g. with other generation settings)."""
    from specsparse.study.store import ResultsStore  # noqa: PLC0415 - figures stay importable without sqlite work

    latest: dict[tuple[str, str, str], dict] = {}
    for store_path in stores:  # files that exist (`report._store_frames` leaves the rest out)
        with ResultsStore(store_path) as store:
            rows = store.rows(split="calibration", early_stopped=False)
        for row in rows:
            if row.get("candidate.skip_layers") != () or row.get("candidate.vocab_size") is not None:
                continue
            drafter = str(row.get("drafter.class_path") or "").rsplit(".", 1)[-1]
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


def plot_samples(frame: pd.DataFrame, title: str, path: str | os.PathLike, metric_name: str = "task metric") -> Path:
    """Per test prompt, dense against the selection (Fig. 5): accept length, and the metric (named, 0-100)
    where the domain has one; points above the diagonal improved."""
    panels = [("accept", "accept length")]
    panels += [("metric", f"{metric_name} (0-100)")] if frame["metric_dense"].notna().any() else []
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
