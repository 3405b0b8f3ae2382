"""Token statistics and the latency model behind draft-vocabulary trimming.

The drafter's LM head keeps only the top-k most frequent token ids of a domain. Coverage C(k) is the
share of the domain's tokens those k ids account for; latency reduction R(k) comes from a FLOPs model
where only the LM head scales with k.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np


def token_frequencies(token_id_lists: Iterable[Iterable[int]]) -> Counter[int]:
    """Count token ids over sequences: [[5, 7, 5], [7]] -> Counter({5: 2, 7: 2})."""
    counts: Counter[int] = Counter()
    for ids in token_id_lists:
        counts.update(int(i) for i in ids)
    return counts


def _ranked_seen(counts: Mapping[int, int]) -> list[int]:
    """Seen ids by count descending, ties by id ascending."""
    return sorted((i for i, n in counts.items() if n > 0), key=lambda i: (-counts[i], i))


@dataclass(frozen=True)
class CoverageCurve:
    """C(k): share of all counted tokens whose id is among the k most frequent ids.

    cumulative[k] = C(k) for k = 0..n_seen (cumulative[0] = 0, cumulative[n_seen] = 1); C(k) = 1 for
    k >= n_seen. Callable, so it plugs directly into `TPEVocabSearch(coverage=...)`.
    """

    cumulative: tuple[float, ...]

    def __call__(self, k: int) -> float:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        return self.cumulative[min(int(k), len(self.cumulative) - 1)]

    @property
    def n_seen(self) -> int:
        return len(self.cumulative) - 1


def coverage_curve(counts: Mapping[int, int]) -> CoverageCurve:
    """Coverage curve of token counts (see `CoverageCurve`). Empty counts give C(k) = 1 for all k
    (nothing to cover)."""
    ranked = np.array([counts[i] for i in _ranked_seen(counts)], dtype=np.float64)
    total = ranked.sum()
    if total == 0:
        return CoverageCurve((1.0,))
    cum = np.concatenate([[0.0], np.cumsum(ranked) / total])
    cum[-1] = 1.0  # exact, despite rounding in the cumulative sum
    return CoverageCurve(tuple(float(x) for x in cum))


def top_k_ids(counts: Mapping[int, int], k: int, vocab_size: int) -> np.ndarray:
    """The k ids a trimmed head keeps, in rank order: seen ids by count descending (ties by id), then
    never-seen ids by id. Returns int64 array [k]."""
    if not 0 <= k <= vocab_size:
        raise ValueError(f"k must be in [0, {vocab_size}], got {k}")
    seen = _ranked_seen(counts)
    bad = [i for i in seen if not 0 <= i < vocab_size]
    if bad:
        raise ValueError(f"token ids outside [0, {vocab_size}): {bad[:5]}")
    if k <= len(seen):
        return np.array(seen[:k], dtype=np.int64)
    mask = np.ones(vocab_size, dtype=bool)
    mask[seen] = False
    unseen = np.flatnonzero(mask)[: k - len(seen)]
    return np.concatenate([np.array(seen, dtype=np.int64), unseen.astype(np.int64)])


def head_latency_reduction(k: int, vocab_size: int, hidden_size: int, non_head_flops_per_token: float) -> float:
    """R(k) = 1 - (F + 2*h*k) / (F + 2*h*V): share of drafter FLOPs per token saved by a k-row head,
    where F is everything but the head (one matmul of 2*h FLOPs per vocabulary row)."""
    if not 0 <= k <= vocab_size:
        raise ValueError(f"k must be in [0, {vocab_size}], got {k}")
    full = non_head_flops_per_token + 2.0 * hidden_size * vocab_size
    return 1.0 - (non_head_flops_per_token + 2.0 * hidden_size * k) / full
