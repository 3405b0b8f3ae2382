"""95% intervals from a bootstrap over prompts, paired where two configurations ran the same prompts.

Accept length A is tokens / verification steps over the prompts of a split (a ratio of sums), so a
resample recomputes that ratio. The metric M is resampled as the mean of the per-prompt scores: for
every metric here except sacreBLEU that mean is the corpus score itself. Corpus BLEU is not a mean of
sentence scores, so its interval is the sentence-BLEU mean's interval moved to the corpus score (for
M, shifted by their difference; for M/M0, scaled by the ratio of the two ratios).
Paired ratios (A/A0, M/M0) draw the same prompts for both configurations, which removes the
prompt-to-prompt variance they share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsparse.types import Measurement

DRAWS = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95% interval."""

    point: float
    low: float
    high: float

    def as_list(self) -> list[float]:
        return [self.point, self.low, self.high]

    def __str__(self) -> str:
        return f"{self.point:.3f} [{self.low:.3f}-{self.high:.3f}]"


def _draws(n: int, seed: int) -> np.ndarray:
    """[DRAWS, n] prompt indices, the same for every statistic of one seed (paired)."""
    return np.random.default_rng(seed).integers(0, n, size=(DRAWS, n))


def _percentiles(values: np.ndarray) -> tuple[float, float]:
    """The 95% percentile interval; infinite ratios (x / 0) sort last and come back as inf."""
    tail = 100 * (1 - LEVEL) / 2
    # Nearest draws, not interpolation between them: inf - inf would be NaN.
    low = np.percentile(values, tail, method="lower")
    high = np.percentile(values, 100 - tail, method="higher")
    return float(low), float(high)


def mean_interval(values: np.ndarray | list[float], seed: int = 0) -> Interval:
    """The mean of per-prompt values (e.g. 1/0 routing hits) with its bootstrap interval."""
    values = np.asarray(values, dtype=float)
    low, high = _percentiles(values[_draws(len(values), seed)].mean(axis=1))
    return Interval(float(values.mean()), low, high)


def _prompt_arrays(m: Measurement) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per prompt: tokens, verification steps, and metric (None when any prompt has none)."""
    tokens = np.array([p.new_tokens for p in m.per_prompt], dtype=float)
    steps = np.array([len(p.accept_lengths) for p in m.per_prompt], dtype=float)
    scores = [p.metric for p in m.per_prompt]
    metric = None if not scores or any(s is None for s in scores) else np.array(scores, dtype=float)
    return tokens, steps, metric


def _safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, with 0 / 0 = 1 (nothing to lose) and x / 0 = inf for x > 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 1.0))


def accept_interval(m: Measurement, seed: int = 0) -> Interval | None:
    """A with its interval; None without per-prompt results."""
    if not m.per_prompt:
        return None
    tokens, steps, _ = _prompt_arrays(m)
    idx = _draws(len(tokens), seed)
    return Interval(m.accept_length, *_percentiles(_safe_ratio(tokens[idx].sum(1), steps[idx].sum(1))))


def metric_interval(m: Measurement, seed: int = 0) -> Interval | None:
    """M with its interval; None without a metric or per-prompt scores."""
    if m.metric is None or not m.per_prompt:
        return None
    _, _, metric = _prompt_arrays(m)
    if metric is None:
        return None
    idx = _draws(len(metric), seed)
    shift = m.metric - float(metric.mean())  # 0 unless the corpus score is not the mean (BLEU)
    low, high = _percentiles(metric[idx].mean(1))
    return Interval(m.metric, low + shift, high + shift)


@dataclass(frozen=True)
class PairedRatios:
    """Candidate / dense on the same prompts: accept length and metric (None without a metric)."""

    accept: Interval
    metric: Interval | None


def paired_ratios(dense: Measurement, candidate: Measurement, seed: int = 0) -> PairedRatios | None:
    """A/A0 and M/M0 with paired-bootstrap intervals; None unless both ran the same prompts in the
    same order (an early-stopped measurement covers fewer)."""
    ids = [p.example_id for p in dense.per_prompt]
    if not ids or ids != [p.example_id for p in candidate.per_prompt]:
        return None
    tokens0, steps0, metric0 = _prompt_arrays(dense)
    tokens1, steps1, metric1 = _prompt_arrays(candidate)
    idx = _draws(len(ids), seed)
    a0, a1 = _safe_ratio(tokens0[idx].sum(1), steps0[idx].sum(1)), _safe_ratio(tokens1[idx].sum(1), steps1[idx].sum(1))
    accept = Interval(_point_ratio(candidate.accept_length, dense.accept_length), *_percentiles(_safe_ratio(a1, a0)))
    metric = None
    if dense.metric is not None and candidate.metric is not None and metric0 is not None and metric1 is not None:
        ratios = _safe_ratio(metric1[idx].mean(1), metric0[idx].mean(1))
        point = _point_ratio(candidate.metric, dense.metric)
        of_means = _point_ratio(float(metric1.mean()), float(metric0.mean()))
        scale = point / of_means if np.isfinite(point) and of_means > 0 and np.isfinite(of_means) else 1.0
        low, high = _percentiles(ratios)
        metric = Interval(point, low * scale, high * scale)
    return PairedRatios(accept, metric)


def _point_ratio(x: float, x0: float) -> float:
    return float(_safe_ratio(np.array(x), np.array(x0)))


def comparison(dense: Measurement | None, candidate: Measurement | None, seed: int = 0) -> dict | None:
    """JSON-able [point, low, high] lists: A and M of both, and the paired ratios A/A0 and M/M0."""
    if dense is None or candidate is None:
        return None
    ratios = paired_ratios(dense, candidate, seed)

    def listed(interval: Interval | None) -> list[float] | None:
        return None if interval is None else interval.as_list()

    return {
        "accept_dense": listed(accept_interval(dense, seed)),
        "accept_selected": listed(accept_interval(candidate, seed)),
        "metric_dense": listed(metric_interval(dense, seed)),
        "metric_selected": listed(metric_interval(candidate, seed)),
        "accept_ratio": None if ratios is None else listed(ratios.accept),
        "metric_ratio": None if ratios is None else listed(ratios.metric),
    }
