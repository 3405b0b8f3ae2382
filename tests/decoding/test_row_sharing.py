"""Work shared between rows of a batch equals every row computed alone: a shared prompt prefix computed
once and copied (prefill), and a layer computed once for rows with the same tokens that skip the same
layers below it (one prompt under several skip sets)."""

import torch
from conftest import NUM_LAYERS, skip_sets
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.decoding.batched import generate_batch
from specsparse.decoding.batched.session import BatchedSession, _prefix_rounds
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.session import ModelSession
from specsparse.types import GenerationConfig


# Prompts built from a few stems, prefixes of one another or not, so that rows really share
# prefixes of every length.
@st.composite
def stems(draw):
    base = draw(st.lists(st.integers(0, 30), min_size=1, max_size=12))
    cuts = draw(st.lists(st.integers(1, len(base)), min_size=1, max_size=3))
    others = draw(st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=12), max_size=2))
    return [base[:cut] for cut in cuts] + others


@st.composite
def prompt_waves(draw, waves=1):
    """`waves` lists of rows: each row a prompt (stem + tail) and a skip set, from one small pool of
    stems and skip sets shared by every wave."""
    pool = draw(stems())
    skips = draw(st.lists(skip_sets(NUM_LAYERS), min_size=1, max_size=2))
    row = st.tuples(st.sampled_from(pool), st.lists(st.integers(0, 30), max_size=6), st.sampled_from(skips))
    drawn = [draw(st.lists(row, min_size=1, max_size=6)) for _ in range(waves)]
    return [[(stem + tail, skip) for stem, tail, skip in rows if stem + tail] for rows in drawn]


def prompt_rows():
    return prompt_waves().map(lambda waves: waves[0])


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
@given(waves=prompt_waves(waves=2), min_shared=st.integers(1, 4))
def test_shared_prefill_gives_each_row_its_own_logits(tiny, waves, min_shared):
    """Two waves (the second wave's rows can copy prefixes from the first's, still held): the next
    token's logits of every row equal those of the prompt prefilled alone."""
    first, second = waves
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


@settings(max_examples=40, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 30), min_size=2, max_size=10),
    skips=st.lists(skip_sets(NUM_LAYERS), min_size=2, max_size=5),
    steps=st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=3), min_size=1, max_size=3),
    diverge=st.booleans(),
)
def test_one_prompt_under_several_skip_sets_gives_each_its_own_logits(tiny, prompt, skips, steps, diverge):
    """Rows of one prompt and different skip sets (some repeated) share layers below their first
    difference; after each step every row's logits equal its skip set's alone. With `diverge`, the
    last row takes other tokens, so its history stops matching the others'."""
    with torch.inference_mode():
        session = BatchedSession(tiny.model, (), len(skips), 64)
        alone = []
        for row, skip in enumerate(skips):
            session.reset_row(row, skip)
            alone.append(ModelSession(tiny.model, skip))
        chunks = {row: list(prompt) for row in range(len(skips))}
        for step in [None, *steps]:
            if step is not None:
                chunks = {row: list(step) for row in range(len(skips))}
                if diverge:
                    chunks[len(skips) - 1] = [(t + 1) % 31 for t in step]
            logits = session.forward(chunks)
            for row, tokens in chunks.items():
                torch.testing.assert_close(logits[row], alone[row].forward(tokens), rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(
    stem=st.lists(st.integers(0, 20), max_size=14),
    tails=st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=6), min_size=1, max_size=3),
    skips=st.lists(skip_sets(NUM_LAYERS), min_size=1, max_size=4),
    max_new=st.integers(1, 12),
    batch_size=st.integers(1, 8),
)
def test_every_prompt_under_every_skip_set_in_one_batch_equals_the_engine(models, stem, tails, skips, max_new,
                                                                         batch_size):
    """What a search level measures: every (skip set, prompt) row in one lockstep batch. Prompts share
    a stem long enough for prefill to share it, and rows entering late copy it from earlier rows."""
    prompts = [stem + tail for tail in tails]
    target = models[0]
    config = GenerationConfig(max_new_tokens=max_new, num_draft_tokens=0)
    rows = [(skip, prompt) for prompt in prompts for skip in skips]  # example-major, as measurement orders them
    batched = generate_batch(target, [p for _, p in rows], None, config, [s for s, _ in rows], batch_size=batch_size)
    expected = [speculative_generate(target, p, None, config, s).new_token_ids for s, p in rows]
    assert [r.new_token_ids for r in batched] == expected


def test_a_rolled_back_row_gives_only_what_it_still_holds(tiny):
    """A row that rejected drafts and then took other tokens holds [prompt, x, w], not its rejected
    [x, y]: a new row asking for [prompt, x, y, w] may copy [prompt, x] from it, nothing more."""
    prompt, x, y, w = list(range(3, 15)), 20, 21, 22
    with torch.inference_mode():
        session = BatchedSession(tiny.model, (), 2, 64)
        session.reset_row(0, ())
        session.prefill({0: prompt})
        session.forward({0: [x, y]})
        session.keep(0, len(prompt) + 1)  # y rejected
        session.forward({0: [w]})
        session.reset_row(1, ())
        session.prefill({1: [*prompt, x, y]}, min_shared=4)
        logits = session.forward({1: [w]})[1]
        alone = ModelSession(tiny.model, ())
        alone.prefill([*prompt, x, y])
        torch.testing.assert_close(logits, alone.forward([w]), rtol=1e-4, atol=1e-4)


def test_a_late_start_beside_a_long_chunk_fits_a_tight_cache(tiny):
    """One round runs a row that copied a long prefix (starting late, two tokens left) beside a row
    with a long chunk from position 0: the padding of the late row must not run past the cache, which
    holds exactly the longest prompt."""
    prompt, unique = list(range(3, 43)), [(7 * i) % 31 for i in range(30)]
    with torch.inference_mode():
        session = BatchedSession(tiny.model, (), 3, len(prompt) + 1)
        session.reset_row(0, ())
        session.prefill({0: prompt})
        for row in (1, 2):
            session.reset_row(row, ())
        session.prefill({1: [*prompt[:38], 50, 51], 2: unique}, min_shared=4)
        logits = session.forward({1: [52], 2: [53]})
        for row, tokens, last in ((1, [*prompt[:38], 50, 51], 52), (2, unique, 53)):
            alone = ModelSession(tiny.model, ())
            alone.prefill(tokens)
            torch.testing.assert_close(logits[row], alone.forward([last]), rtol=1e-4, atol=1e-4)


def test_rows_with_one_history_split_at_different_lengths_share_no_layer(tiny):
    """Two rows under skip sets that agree below layer 2 ask for the same tokens, but one copied a
    prefix from an earlier row and runs only the rest: their inputs differ, so no layer is shared."""
    prompt = list(range(3, 27))
    with torch.inference_mode():
        session = BatchedSession(tiny.model, (), 3, 64)
        session.reset_row(0, (2,))
        session.prefill({0: [*prompt[:16], 40, 41]})
        session.reset_row(1, (2,))
        session.reset_row(2, (3,))
        session.prefill({1: prompt, 2: prompt}, min_shared=4)  # row 1 copies 16 tokens from row 0
        logits = session.forward({1: [50], 2: [50]})
        for row, skip in ((1, (2,)), (2, (3,))):
            alone = ModelSession(tiny.model, skip)
            alone.prefill(prompt)
            torch.testing.assert_close(logits[row], alone.forward([50]), rtol=1e-4, atol=1e-4)


@settings(max_examples=30, deadline=None)
@given(
    contexts=st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=12), min_size=1, max_size=6),
    chunk_lengths=st.lists(st.integers(0, 6), min_size=6, max_size=6),
    skips=st.lists(skip_sets(NUM_LAYERS), min_size=1, max_size=3),
    all_rows=st.booleans(),
)
def test_linear_maps_on_token_positions_only_equal_the_padded_forward(tiny, contexts, chunk_lengths, skips, all_rows):
    """Rows with chunks of very different lengths (0 to 6 tokens, as a lockstep step has): the forward
    whose linear maps run on token positions only, with grouped-query attention reading keys and values
    in place, gives the logits of the padded forward with HF's attention."""
    chunk_lengths = [max(1, chunk_lengths[0]), *chunk_lengths[1:]]  # a forward runs at least one token

    def run(fast: bool) -> dict[int, torch.Tensor]:
        with torch.inference_mode():
            session = BatchedSession(tiny.model, (), len(contexts), 64)
            if not fast:
                session.pack_below, session.attention = 0.0, None
            for row, context in enumerate(contexts):
                session.reset_row(row, skips[row % len(skips)])
                session.prefill({row: context})
            chunks = {row: [(7 * row + i) % 31 for i in range(chunk_lengths[row])] for row in range(len(contexts))}
            return session.forward({r: c for r, c in chunks.items() if c or not all_rows}, all_rows=all_rows)

    fast, padded = run(True), run(False)
    assert fast.keys() == padded.keys()
    for row in padded:
        torch.testing.assert_close(fast[row], padded[row], rtol=1e-4, atol=1e-4)  # float summation order
