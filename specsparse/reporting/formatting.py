"""The tables as the report shows them: cells as text ("n/a" where a number does not exist, never 0),
the paper's slim layouts with 95% intervals in brackets, and Markdown, LaTeX and CSV renderings."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from specsparse.reporting.records import bounded
from specsparse.util import atomic_write_text

NA = "n/a"


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


def _interval_text(row: pd.Series, name: str, digits: int, suffix: str = "") -> str:
    """"point [low-high]" of a bounded column (just the point without bounds; "n/a" without it)."""
    point, low, high = (row.get(c) for c in bounded(name))
    if point is None or pd.isna(point):
        return NA
    text = f"{point:.{digits}f}{suffix}"
    if low is not None and high is not None and not (pd.isna(low) or pd.isna(high)):
        text += f" [{low:.{digits}f}-{high:.{digits}f}]"
    return text


def _pair(native: str, tss: str) -> str:
    return native if native == tss == NA else f"{native} -> {tss}"


def slim_table1(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 1 in the paper's layout: per domain, the measured speedups with their 95% intervals (TSS
    over plain decoding first, then native over plain and TSS over native), native -> TSS accept
    length, metric (0-100, named) and measured tokens/s (plain; native -> TSS), the share of layers
    skipped and the held-out verdict (intervals of A and M are in the CSV)."""
    rows = []
    for _, r in frame.iterrows():
        metric = _pair(format_cell("metric", r["metric_native"]), format_cell("metric", r["metric_tss"]))
        rates = _pair(format_cell("measured_tokens_per_s", r["measured_tokens_per_s_native"]),
                      format_cell("measured_tokens_per_s", r["measured_tokens_per_s_tss"]))
        rows.append({
            "model": r["model"], "method": r["method"], "domain": r["domain"],
            "TSS vs plain [95% CI]": _interval_text(r, "measured_speedup_vs_plain", 2, "x"),
            "native vs plain [95% CI]": _interval_text(r, "measured_speedup_native_vs_plain", 2, "x"),
            "TSS vs native [95% CI]": _interval_text(r, "measured_speedup", 2, "x"),
            "A": _pair(format_cell("accept", r["accept_native"]), format_cell("accept", r["accept_tss"])),
            "metric (0-100)": metric if pd.isna(r["metric_name"]) or r["metric_name"] is None
            else f"{r['metric_name']} {metric}",
            "measured tok/s": rates if pd.isna(r["measured_plain_tokens_per_s"])
            else f"{r['measured_plain_tokens_per_s']:.1f}; {rates}",
            "skipped": format_cell("skipped_ratio", r["skipped_ratio"]),
            "verdict": r["verdict"] if isinstance(r["verdict"], str) else NA,
        })
    return pd.DataFrame(rows, columns=["model", "method", "domain", "TSS vs plain [95% CI]", "native vs plain [95% CI]",
                                       "TSS vs native [95% CI]", "A", "metric (0-100)", "measured tok/s", "skipped",
                                       "verdict"])


def slim_table2(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 2's readable view: per domain and strategy, the pick, its measured speedup over plain
    decoding and over dense speculative decoding, A and M with 95% intervals, the verdict and the
    configurations measured."""
    rows = []
    for _, r in frame.iterrows():
        metric = _interval_text(r, "metric", 1)
        rows.append({
            "model": r["model"], "domain": r["domain"], "strategy": r["strategy"], "pick": r["selected_skip_layers"],
            "vs plain [95% CI]": _interval_text(r, "measured_speedup_vs_plain", 2, "x"),
            "vs dense [95% CI]": _interval_text(r, "measured_speedup", 2, "x"),
            "A [95% CI]": _interval_text(r, "accept", 2),
            "metric (0-100) [95% CI]": metric if metric == NA or not isinstance(r["metric_name"], str)
            else f"{r['metric_name']} {metric}",
            "verdict": r["verdict"] if isinstance(r["verdict"], str) else NA,
            "configurations": r["configurations"],
        })
    return pd.DataFrame(rows, columns=["model", "domain", "strategy", "pick", "vs plain [95% CI]", "vs dense [95% CI]",
                                       "A [95% CI]", "metric (0-100) [95% CI]", "verdict", "configurations"])


def slim_vocab_comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """The comparison as the paper lays it out: one line per head, intervals in brackets."""
    return pd.DataFrame({
        "domain": frame["domain"], "head": frame["label"], "k": frame["k"].astype("Int64"),
        "C(k) corpus": frame["coverage_corpus"], "C(k) target replies": frame["coverage_generations"],
        "R(k) modeled": frame["modeled_latency_reduction"], "accept length": frame["accept_length"],
        "draft ms/step": frame["draft_ms_per_step"], "measured tok/s": frame["measured_tokens_per_s"],
        "latency s [95% CI]": [_interval_text(r, "measured_latency_s", 3) for _, r in frame.iterrows()],
        "vs full [95% CI]": [_interval_text(r, "measured_speedup_vs_full", 2, "x") for _, r in frame.iterrows()],
        "vs plain [95% CI]": [_interval_text(r, "measured_speedup_vs_plain", 2, "x") for _, r in frame.iterrows()],
        "vs pruned at k [95% CI]": [_interval_text(r, "measured_speedup_vs_pruned", 2, "x") for _, r in frame.iterrows()],
        "replies = plain": [f"{a}/{b}" for a, b in zip(frame["same_as_plain"], frame["prompts"])],
    })


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
