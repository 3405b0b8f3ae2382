"""Shared-prefix prefill: computing a prefix once and copying it equals prefilling every row alone."""

import torch
from conftest import NUM_LAYERS, skip_sets
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.decoding.session import BatchedSession, ModelSession, _prefix_rounds

# Prompts built from a few stems, so that rows really share prefixes of every length.
stems = st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=12), min_size=1, max_size=3)


@st.composite
def prompt_rows(draw):
    """(stems, rows): each row a prompt (stem + tail) and a skip set from a small pool."""
    pool = draw(stems)
    skips = draw(st.lists(skip_sets(NUM_LAYERS), min_size=1, max_size=2))
    rows = draw(st.lists(
        st.tuples(st.sampled_from(pool), st.lists(st.integers(0, 30), max_size=6), st.sampled_from(skips)),
        min_size=1, max_size=6,
    ))
    return [(stem + tail, skip) for stem, tail, skip in rows if stem + tail]


@settings(max_examples=60, deadline=None)
@given(rows=prompt_rows(), min_shared=st.integers(1, 6))
def test_every_row_is_covered_once_by_segments_that_share_tokens_and_skip_set(rows, min_shared):
    chunks = {r: tuple(tokens) for r, (tokens, _) in enumerate(rows)}
    skips = [skip for _, skip in rows]
    reached = {r: 0 for r in chunks}
    for segments in _prefix_rounds(chunks, skips, min_shared):
        ran = [r for rows_, _ in segments for r in rows_]
        assert len(ran) == len(set(ran)), "a row in two segments of one round"
        for members, stop in segments:
            starts = {reached[r] for r in members}
            assert len(starts) == 1, "a segment's rows must all have the same earlier tokens"
            assert len({chunks[r][:stop] for r in members}) == 1
            assert len({skips[r] for r in members}) == 1
            if len(members) > 1:
                assert stop - starts.pop() >= min_shared
            for r in members:
                reached[r] = stop
    assert reached == {r: len(tokens) for r, tokens in chunks.items()}


@settings(max_examples=40, deadline=None)
@given(first=prompt_rows(), second=prompt_rows(), min_shared=st.integers(1, 4))
def test_shared_prefill_gives_each_row_its_own_logits(tiny, first, second, min_shared):
    """Two waves (the second wave's rows can copy prefixes from the first's, still held): the next
    token's logits of every row equal those of the prompt prefilled alone."""
    rows = first + second
    with torch.inference_mode():
        session = BatchedSession(tiny.model, (), len(rows), 64)
        for wave in (range(len(first)), range(len(first), len(rows))):
            for r in wave:
                session.reset_row(r, rows[r][1])
            session.prefill({r: rows[r][0][:-1] for r in wave}, min_shared)
        logits = session.forward({r: [tokens[-1]] for r, (tokens, _) in enumerate(rows)})
        for r, (tokens, skip) in enumerate(rows):
            alone = ModelSession(tiny.model, skip)
            alone.prefill(tokens[:-1])
            torch.testing.assert_close(logits[r], alone.forward(tokens[-1:]), rtol=1e-4, atol=1e-4)
