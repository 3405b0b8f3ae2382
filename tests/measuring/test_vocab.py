"""Token frequencies, the coverage curve C(k), the kept ids and the modeled head latency reduction R(k)
of a trimmed draft vocabulary (`specsparse.measuring.vocab`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.measuring.vocab import coverage_curve, head_latency_reduction, token_frequencies, top_k_ids

V, HIDDEN, NON_HEAD = 32_000, 512, 1.0e7  # a 32k-token head over 512 features; 10 MFLOPs/token elsewhere


def test_token_frequencies_and_coverage():
    counts = token_frequencies([[5, 7, 5], [7, 9, 5]])
    assert counts == {5: 3, 7: 2, 9: 1}
    curve = coverage_curve(counts)
    assert [curve(k) for k in range(5)] == pytest.approx([0, 3 / 6, 5 / 6, 1, 1])
    assert curve.n_seen == 3
    assert coverage_curve({})(10) == 1.0


def test_top_k_ids_ties_and_unseen():
    counts = {8: 2, 3: 2, 6: 5}
    assert top_k_ids(counts, 3, 10).tolist() == [6, 3, 8]  # tie 3/8 broken by id
    assert top_k_ids(counts, 6, 10).tolist() == [6, 3, 8, 0, 1, 2]  # unseen after seen, by id
    assert top_k_ids(counts, 10, 10).tolist() == [6, 3, 8, 0, 1, 2, 4, 5, 7, 9]
    with pytest.raises(ValueError):
        top_k_ids({12: 1}, 1, 10)
    with pytest.raises(ValueError):
        top_k_ids(counts, 11, 10)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 30), max_size=20), max_size=8), st.integers(0, 31))
def test_coverage_matches_top_k(seqs, k):
    counts = token_frequencies(seqs)
    total = sum(counts.values())
    kept = set(top_k_ids(counts, k, 31).tolist())
    covered = sum(n for i, n in counts.items() if i in kept)
    curve = coverage_curve(counts)
    assert curve(k) == pytest.approx(covered / total if total else 1.0)
    assert all(curve(j) <= curve(j + 1) for j in range(32))


def test_head_latency_reduction():
    assert head_latency_reduction(V, V, HIDDEN, NON_HEAD) == 0.0
    full = NON_HEAD + 2 * HIDDEN * V
    assert head_latency_reduction(0, V, HIDDEN, NON_HEAD) == pytest.approx(2 * HIDDEN * V / full)
    assert head_latency_reduction(1000, V, HIDDEN, 0.0) == pytest.approx(1 - 1000 / V)
