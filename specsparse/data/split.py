"""Deterministic calibration / test split and cross-source de-duplication.

Examples are ranked by a number fixed by (seed, example id) through SHA-256, and the lowest
round(fraction * n) go to calibration. The split is the same on every machine and Python version,
does not depend on list order, has exactly the requested size (small built-in sets would otherwise
get 1 calibration prompt out of 28 by bad luck), and adding one example moves at most one other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from specsparse.data.examples import Example


def split_unit(example_id: str, seed: int = 0) -> float:
    """A uniform number in [0, 1) fixed by (seed, example id): the first 8 bytes of
    SHA-256("<seed>:<id>") read as a big-endian integer, divided by 2**64."""
    digest = hashlib.sha256(f"{seed}:{example_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_examples(
    examples: Sequence[Example],
    calibration_fraction: float = 0.2,
    seed: int = 0,
    exclude_ids: Iterable[str] = (),
) -> tuple[list[Example], list[Example]]:
    """Split into (calibration, test), each in input order.

    The round(calibration_fraction * n) examples with the smallest `split_unit(id, seed)` go to
    calibration.
    exclude_ids: ids removed from *both* splits (e.g. GSM8K questions that also appear in another
        benchmark, see `overlapping_ids`), so a held-out question can leak neither into the search
        nor into the evaluation whichever of the two uses this set.
    With >= 2 remaining examples each split gets at least one.
    """
    if not 0.0 < calibration_fraction < 1.0:
        raise ValueError(f"calibration_fraction must be in (0, 1), got {calibration_fraction}")
    ids = [ex.id for ex in examples]
    if len(set(ids)) != len(ids):
        raise ValueError("example ids must be unique to split deterministically")
    excluded = set(exclude_ids)
    kept = [ex for ex in examples if ex.id not in excluded]
    ranked = sorted(kept, key=lambda ex: (split_unit(ex.id, seed), ex.id))
    size = round(calibration_fraction * len(kept))
    if len(kept) >= 2:
        size = min(max(size, 1), len(kept) - 1)
    calibration_ids = {ex.id for ex in ranked[:size]}
    calibration = [ex for ex in kept if ex.id in calibration_ids]
    test = [ex for ex in kept if ex.id not in calibration_ids]
    return calibration, test


def _normalize_text(text: str) -> str:
    return " ".join(text.split())


def overlapping_ids(examples: Iterable[Example], others: Iterable[Example]) -> set[str]:
    """Ids of `examples` whose first turn equals (whitespace-normalised) any turn of `others`.

    E.g. overlapping_ids(gsm8k_examples, spec_bench_math_examples) finds the GSM8K test questions
    that Spec-Bench math_reasoning reuses; pass them as `exclude_ids` to `split_examples`.
    """
    seen = {_normalize_text(turn) for ex in others for turn in ex.turns}
    return {ex.id for ex in examples if _normalize_text(ex.turns[0]) in seen}
