"""Model-free drafters (prompt lookup, suffix automaton, Token Recycling) against brute-force references.

The engine is simulated: committed tokens come from a fixed "true" sequence (accepted drafts that
match it, then the bonus token) and the verification logits are random.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.drafters import (
    Drafter,
    PromptLookupDrafter,
    Proposal,
    SuffixAutomatonDrafter,
    TokenRecyclingDrafter,
)
from specsparse.drafters.recycling import sized_node_budget, sized_widths, tree_nodes

VOCAB = 6
FAST = settings(max_examples=60, deadline=None)

token_seqs = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=40)


def simulate(drafter: Drafter, seq: list[int], prompt_len: int, k: int, seed: int, check) -> None:
    """Drive `drafter` like the engine over `seq`, calling check(context, proposal, k) every step."""
    gen = torch.Generator().manual_seed(seed)
    ctx = list(seq[:prompt_len])
    drafter.begin(list(ctx))
    while len(ctx) < len(seq):
        proposal = drafter.propose(k)
        assert len(proposal.tokens) <= k
        check(ctx, proposal, k)
        accepted = 0
        while (
            accepted < len(proposal.tokens)
            and len(ctx) + accepted + 1 < len(seq)
            and proposal.tokens[accepted] == seq[len(ctx) + accepted]
        ):
            accepted += 1
        committed = seq[len(ctx) : len(ctx) + accepted + 1]
        verified_ids = [ctx[-1], *proposal.tokens]
        logits = torch.randn(len(verified_ids), VOCAB, generator=gen)
        drafter.observe(committed, verified_ids, logits)
        ctx.extend(committed)


def pld_reference(ids: list[int], k: int, max_n: int, min_n: int) -> list[int]:
    """HF's algorithm, spelled out: leftmost occurrence of the longest tail n-gram with a continuation."""
    for n in range(min(max_n, len(ids) - 1), min_n - 1, -1):
        tail = ids[len(ids) - n :]
        for i in range(len(ids) - n):
            if ids[i : i + n] == tail:
                return ids[i + n : i + n + k]
    return []


def longest_earlier_suffix(ids: list[int]) -> tuple[int, int]:
    """(length, first end index) of the longest suffix of ids that also ends somewhere before the end."""
    n_ids = len(ids)
    for n in range(n_ids - 1, 0, -1):
        tail = ids[n_ids - n :]
        for end in range(n - 1, n_ids - 1):
            if ids[end - n + 1 : end + 1] == tail:
                return n, end
    return 0, -1


# ---------------------------------------------------------------- prompt lookup


@FAST
@given(seq=token_seqs, data=st.data())
def test_pld_matches_reference(seq, data):
    prompt_len = data.draw(st.integers(1, len(seq)))
    k = data.draw(st.integers(0, 6))
    max_n = data.draw(st.integers(1, 4))
    min_n = data.draw(st.integers(1, max_n))

    def check(ctx, proposal, k):
        assert proposal.tokens == pld_reference(ctx, k, max_n, min_n)
        assert proposal.probs is None

    simulate(PromptLookupDrafter(max_n, min_n), seq, prompt_len, k, 0, check)


@settings(max_examples=40, deadline=None)
@given(seq=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=30), k=st.integers(1, 5), max_n=st.integers(1, 4))
def test_pld_matches_hf_prompt_lookup(seq, k, max_n):
    cg = pytest.importorskip("transformers.generation.candidate_generator")
    hf = cg.PromptLookupCandidateGenerator(num_output_tokens=k, max_matching_ngram_size=max_n, max_length=10**6)

    def check(ctx, proposal, k):
        out, _ = hf.get_candidates(torch.tensor([ctx]))
        assert proposal.tokens == out[0, len(ctx) :].tolist()

    simulate(PromptLookupDrafter(max_n, 1), seq, max(1, len(seq) // 2), k, 0, check)


def test_pld_known_example():
    d = PromptLookupDrafter(max_ngram_size=3)
    d.begin([1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3])
    # The trigram [1, 2, 3] first occurs at 0, so the draft follows that one, not the later one.
    assert d.propose(4).tokens == [9, 1, 2, 3]
    d.observe([5], [3], torch.zeros(1, VOCAB))
    assert d.propose(4).tokens == []


# ---------------------------------------------------------------- suffix automaton


@FAST
@given(seq=token_seqs, data=st.data())
def test_samd_match_equals_brute_force(seq, data):
    prompt_len = data.draw(st.integers(1, len(seq)))
    k = data.draw(st.integers(0, 6))
    drafter = SuffixAutomatonDrafter(min_match=1)

    def check(ctx, proposal, k):
        n, end = longest_earlier_suffix(ctx)
        assert drafter.match_length == n
        # The matched suffix is the longest string of the tracked state (none longer occurs twice).
        assert drafter._automaton.length[drafter._state] == n
        # The draft is what followed the first earlier occurrence of that suffix.
        assert proposal.tokens == (ctx[end + 1 : end + 1 + k] if n else [])
        assert drafter.num_states <= max(2 * len(ctx) - 1, 2)

    simulate(drafter, seq, prompt_len, k, 0, check)


@settings(max_examples=30, deadline=None)
@given(seq=st.lists(st.integers(0, 2), min_size=2, max_size=200))
def test_samd_automaton_stays_linear(seq):
    d = SuffixAutomatonDrafter()
    d.begin(seq)
    assert d.num_states <= 2 * len(seq) - 1
    assert sum(len(t) for t in d._automaton.next) <= 3 * len(seq) - 4 or len(seq) < 3


def longest_corpus_suffix(ids: list[int], documents: list[list[int]]) -> tuple[int, list[int]]:
    """(length, what follows its first occurrence in the concatenated documents, within that document)
    of the longest suffix of ids occurring in some document."""
    flat = [(doc, i) for doc in documents for i in range(len(doc))]  # in corpus order
    for n in range(len(ids), 0, -1):
        tail = ids[len(ids) - n :]
        for doc, end in flat:
            if end >= n - 1 and doc[end - n + 1 : end + 1] == tail:
                return n, doc[end + 1 :]
    return 0, []


@FAST
@given(seq=token_seqs, documents=st.lists(st.lists(st.integers(0, VOCAB - 1), max_size=12), max_size=4),
       data=st.data())
def test_samd_with_a_corpus_drafts_the_longer_match_as_brute_force_finds_it(seq, documents, data):
    """Context and corpus matches as brute force finds them; the longer one drafts (ties: the context),
    never across a document's end; below min_match, nothing."""
    from specsparse.drafters.samd import SuffixAutomaton

    prompt_len, k, min_match = data.draw(st.integers(1, len(seq))), data.draw(st.integers(0, 6)), data.draw(st.integers(1, 3))
    drafter = SuffixAutomatonDrafter(min_match=min_match, corpus=SuffixAutomaton.of_documents(documents))

    def check(ctx, proposal, k):
        n_context, end = longest_earlier_suffix(ctx)
        n_corpus, following = longest_corpus_suffix(ctx, documents)
        assert (drafter.match_length, drafter.corpus_match_length) == (n_context, n_corpus)
        candidates = [(n_context, ctx[end + 1 : end + 1 + k]), (n_corpus, following[:k])]
        expected = next((tokens for n, tokens in sorted(candidates, key=lambda c: -c[0]) if n >= min_match and tokens), [])
        assert proposal.tokens == expected

    simulate(drafter, seq, prompt_len, k, 0, check)


def test_samd_corpus_of_the_built_in_sets_leaves_a_jobs_test_split_out(smollm):
    """The default static corpus: the built-in sets' references, but those of the ids given (a job's
    test split); a reference kept out cannot be retrieved verbatim, one kept in can."""
    from specsparse.data import load_examples
    from specsparse.drafters.samd import corpus_automaton

    examples = [ex for ex in load_examples("summarization") if len(ex.references[0].split()) >= 8][:2]
    held_out, kept = examples
    automaton = corpus_automaton(smollm.tokenizer, ("builtin:summarization",), (held_out.id,))

    def retrieves(reference: str) -> bool:
        ids = smollm.tokenizer(reference, add_special_tokens=False).input_ids
        state, n = 0, 0
        for tok in ids:
            state, n = automaton.advance(state, n, tok)
        return n == len(ids)

    assert retrieves(kept.references[0]) and not retrieves(held_out.references[0])
    assert corpus_automaton(smollm.tokenizer, ("builtin:summarization",), (held_out.id,)) is automaton  # built once


def test_samd_known_example():
    d = SuffixAutomatonDrafter(min_match=2)
    d.begin([5, 1, 2, 3, 4, 0, 1, 2])
    assert d.match_length == 2
    assert d.propose(3).tokens == [3, 4, 0]
    d.observe([3, 4], [2, 3], torch.zeros(2, VOCAB))
    assert d.match_length == 4
    assert d.propose(9).tokens == [0, 1, 2, 3, 4]


def test_samd_falls_back_to_recycling_on_short_match():
    rec = TokenRecyclingDrafter(VOCAB, top_k=2)
    d = SuffixAutomatonDrafter(min_match=2, fallback=rec)
    d.begin([0, 1, 2])
    assert d.match_length == 0
    assert d.propose(3).tokens == []
    # The fallback learns through the samd drafter: after 2 comes 4, after 4 comes 5.
    logits = torch.zeros(2, VOCAB)
    logits[0, 4] = logits[1, 5] = 1.0
    d.observe([3], [2, 4], logits)
    assert rec.adj[2, 0] == 4 and rec.adj[4, 0] == 5
    d.observe([2], [3], torch.zeros(1, VOCAB))
    assert d.match_length == 1  # [2] occurred before, but 1 < min_match
    assert d.propose(3).tokens == rec.propose(3).tokens == [4, 5]
    d.observe([3], [2], torch.zeros(1, VOCAB))
    assert d.match_length == 2
    assert d.propose(3).tokens == [2, 3]  # from the automaton now, not the fallback
    d.reset()
    assert (rec.adj == -1).all() and d.num_states == 1


def test_samd_without_fallback_proposes_nothing_on_short_match():
    d = SuffixAutomatonDrafter(min_match=3)
    d.begin([1, 2, 1, 2])
    assert d.match_length == 2 and d.propose(4).tokens == []


# ---------------------------------------------------------------- token recycling


@FAST
@given(seq=token_seqs, data=st.data())
def test_recycling_learns_topk_and_proposes_chain(seq, data):
    prompt_len = data.draw(st.integers(1, len(seq)))
    k = data.draw(st.integers(0, 6))
    top_k = data.draw(st.integers(1, VOCAB + 2))
    seed = data.draw(st.integers(0, 2**16))
    drafter = TokenRecyclingDrafter(VOCAB, top_k=top_k)
    # Mirror of the adjacency, updated from the same random logits the simulation draws.
    expected: dict[int, list[int]] = {}

    def check(ctx, proposal, k):
        chain, tok = [], ctx[-1]
        while len(chain) < k and tok in expected:
            tok = expected[tok][0]
            chain.append(tok)
        assert proposal.tokens == chain

    observe = drafter.observe

    def spy(committed, verified_ids, logits):
        for tok, row in zip(verified_ids, logits):
            expected[tok] = torch.topk(row, min(top_k, VOCAB)).indices.tolist()
        observe(committed, verified_ids, logits)
        for tok, succ in expected.items():
            assert drafter.adj[tok, : len(succ)].tolist() == succ

    drafter.observe = spy
    simulate(drafter, seq, prompt_len, k, seed, check)


def test_recycling_chain_stops_at_unknown_and_persists_across_requests():
    d = TokenRecyclingDrafter(VOCAB, top_k=3)
    d.begin([0])
    assert d.propose(4).tokens == []
    logits = torch.zeros(3, VOCAB)
    logits[0, 1] = logits[1, 2] = logits[2, 3] = 1.0
    d.observe([1], [0, 1, 2], logits)
    assert d.propose(4).tokens == [2, 3]
    d.begin([0])  # a new request keeps the adjacency
    assert d.propose(4).tokens == [1, 2, 3]
    assert d.propose(2).tokens == [1, 2]
    d.reset()
    d.begin([0])
    assert d.propose(4).tokens == []


def test_recycling_ignores_padded_logit_columns():
    d = TokenRecyclingDrafter(4, top_k=2)
    d.begin([0])
    logits = torch.tensor([[0.0, 1.0, 2.0, 0.5, 9.0, 9.0]])
    d.observe([2], [0], logits)
    assert d.adj[0].tolist() == [2, 1]


# ---------------------------------------------------------------- all three


def all_drafters() -> list[Drafter]:
    return [
        PromptLookupDrafter(),
        SuffixAutomatonDrafter(),
        SuffixAutomatonDrafter(fallback=TokenRecyclingDrafter(VOCAB)),
        TokenRecyclingDrafter(VOCAB),
    ]


@pytest.mark.parametrize("drafter", all_drafters(), ids=lambda d: d.name)
def test_one_token_prompt_proposes_nothing(drafter):
    drafter.reset()
    drafter.begin([3])
    for k in (0, 1, 5):
        p = drafter.propose(k)
        assert isinstance(p, Proposal) and p.tokens == []
    drafter.observe([3], [3], torch.randn(1, VOCAB))
    assert len(drafter.propose(5).tokens) <= 5


@FAST
@given(seq=token_seqs, data=st.data())
def test_never_more_than_k_and_tokens_in_vocab(seq, data):
    prompt_len = data.draw(st.integers(1, len(seq)))
    k = data.draw(st.integers(0, 6))
    seed = data.draw(st.integers(0, 2**16))

    def check(ctx, proposal, k):
        assert all(0 <= t < VOCAB for t in proposal.tokens)

    for drafter in all_drafters():
        simulate(drafter, seq, prompt_len, k, seed, check)


@settings(max_examples=60, deadline=None)
@given(max_nodes=st.integers(0, 120), depth=st.integers(1, 6), top_k=st.integers(1, 8))
def test_a_sized_tree_is_the_largest_that_fits_its_budget(max_nodes, depth, top_k):
    """Brute force over every branching, widest at the root: none fits more draft tokens."""
    widths = sized_widths(max_nodes, depth, top_k)
    assert list(widths) == sorted(widths, reverse=True) and all(2 <= w <= top_k for w in widths)
    assert tree_nodes(widths, depth) <= max(max_nodes, depth)  # a chain when nothing fits
    fitting = [tree_nodes(w, depth) for n in range(1, depth + 1) for w in itertools.product(range(2, top_k + 1), repeat=n)
               if list(w) == sorted(w, reverse=True) and tree_nodes(w, depth) <= max_nodes]
    assert tree_nodes(widths, depth) == max([depth, *fitting]) or not fitting and widths == ()


def test_the_sized_budget_is_what_a_verification_costing_about_one_forward_holds():
    costs = [1.0, 1.0, 1.02, 1.05, 1.08, 1.1, 1.13, 1.3]  # inputs 1..8, over a one-token forward
    assert sized_node_budget(costs) == 5  # 6 inputs: the root and 5 draft tokens
    assert sized_widths(5, 3, 8) == ()  # the narrowest tree 3 deep, (2,), drafts 6: a chain
    assert sized_widths(9, 3, 8) == (3,)  # 3 + 3 + 3; (2, 2) would draft 10
    drafter = TokenRecyclingDrafter(vocab_size=VOCAB, top_k=4, max_nodes=9)
    drafter.adj[:] = torch.arange(4)  # every token's successors: 0, 1, 2, 3
    drafter.begin([5])
    proposal = drafter.propose(3)
    assert drafter.drafts_trees and len(proposal.tokens) == 9
    assert proposal.parents == (-1, -1, -1, 0, 1, 2, 3, 4, 5)


def test_tree_sized_needs_the_jobs_cost_profile(smollm):
    with pytest.raises(ValueError, match="tree=sized sizes the tree by the job's cost profile"):
        TokenRecyclingDrafter.from_target(smollm, tree="sized")
    with pytest.raises(ValueError, match="tree='big'"):
        TokenRecyclingDrafter.check_options(tree="big")
    TokenRecyclingDrafter.check_options(tree="sized")
    drafter = TokenRecyclingDrafter.from_target(smollm, tree="sized", verification_costs=lambda: [1.0] * 7 + [1.5])
    assert drafter.max_nodes == 6 and drafter.drafts_trees
