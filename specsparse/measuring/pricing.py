"""Pricing: how a measurement's counts become modeled seconds per generated token, by a cost profile.

    time per generated token = (prefill time + draft time + verify time) / new tokens

(the model and its fit: `specsparse.measuring.profile_fit`). A `Pricer` holds a profile and the drafter
costs of one job's drafter; each Evaluator has one (`Evaluator.pricer`), built on the hardware that
measures, so the local runner prices with the job process's profile and a Ray worker with its own
(`cost.profile=PATH` pins one file for all). Everything a job models goes through it: a measurement's
cost (`price`), the modeled terms beside a side-by-side timing (`with_modeled_terms`), the drafter's
share of a step (`draft_share`, for the joint search) and the verification cost by input count
(`verification_costs`, for trees sized by the profile). A stored timing never prices anything.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from specsparse.drafters.base import ConfiguredDrafter
from specsparse.measuring.profile import profile_for, profile_path, save_profile
from specsparse.measuring.profile_fit import CONTEXT, CostProfile, fastest_repeat
from specsparse.measuring.timing import SideBySide
from specsparse.types import Candidate, Measurement

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DraftCost:
    per_step: float = 0.0  # seconds per verification step (a token drafter's propose + observe)
    per_token: float = 0.0  # seconds per drafted token (an LM drafter's forward)


def draft_cost(drafter: ConfiguredDrafter | None, profile: CostProfile, repeats: int = 32) -> DraftCost:
    """The drafter's cost: LM drafters from their model's profile (trimmed head included), token
    drafters from their measured step time, stored in the target's profile (kept in memory only for
    a pinned profile, whose file is never written). A drafter that names its LM-head products
    (`head_calls`: EAGLE chains) stores its body's time once, and its head is priced per row from the
    profile: two vocabularies never differ by when each was timed."""
    if drafter is None:
        return DraftCost()
    model = getattr(drafter, "model", None)
    if model is not None:  # an LM drafter: one forward of its kept layers per drafted token
        own = profile_for(model)
        kept = own.num_layers - len(getattr(drafter, "skip_layers", ()))
        per_token = own.verify_time(kept, 1) - own.head_time(own.vocab_size) + own.head_time(drafter.vocab_size)
        return DraftCost(per_token=max(per_token, 0.0))
    head = (drafter.head_calls(STEP_DRAFT_TOKENS) or 0) * profile.head_time(getattr(drafter, "vocab_size", 0))
    if drafter.cost_key not in profile.drafter_step_s:
        step = _drafter_step_time(drafter, profile.vocab_size, repeats, STEP_DRAFT_TOKENS, rounds=5)
        profile.drafter_step_s[drafter.cost_key] = max(step - head, 0.0)
        if profile.path == str(profile_path(profile.identity)):
            save_profile(profile)
        elif profile.path:
            log.warning("pinned cost profile %s has no step time for drafter %s: measured on this machine "
                        "(pin a profile a job with this drafter has used to price it alike everywhere)",
                        profile.path, drafter.cost_key)
    return DraftCost(per_step=profile.drafter_step_s[drafter.cost_key] + head)


STEP_DRAFT_TOKENS = 5  # tokens a timed drafter step drafts


def _drafter_step_time(drafter: ConfiguredDrafter, vocab: int, repeats: int, k: int = STEP_DRAFT_TOKENS, rounds: int = 1) -> float:
    """Median propose + observe time over `repeats` steps on a repetitive synthetic context (drafts
    exist most steps; a feature drafter gets random features); the fastest of `rounds` rounds."""
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(0, 64, (CONTEXT,), generator=generator).tolist()
    features = None if drafter.feature_layers is None else torch.randn(CONTEXT, drafter.feature_size, generator=generator)
    logits = torch.randn(k + 1, vocab, generator=generator)
    medians = []
    for _ in range(rounds):
        drafter.reset()
        drafter.begin(context)
        if features is not None:
            drafter.observe_features(features[:-1].to(drafter.feature_dtype))
        times = []
        for step in range(repeats):
            start = time.perf_counter()
            proposal = drafter.propose(k)
            committed = [context[step % CONTEXT]]
            if features is not None:
                drafter.observe_features(features[step % CONTEXT][None].to(drafter.feature_dtype))
            rows = torch.arange(len(proposal.tokens) + 1) % logits.shape[0]  # a tree may draft more than k nodes
            drafter.observe(committed, [context[-1], *proposal.tokens], logits[rows])
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    drafter.reset()
    return fastest_repeat(medians)


def price(m: Measurement, profile: CostProfile, kept_layers: int, cost: DraftCost) -> Measurement:
    """`m` with `modeled_cost` (s/token), `modeled_tokens_per_s` and `modeled_verify_cost` (s per
    verification step) from its counts: prompts prefilled and their tokens, and its steps
    (`chunk_counts[i]`: steps that verified i + 1 tokens), what a request timed end to end spends."""
    if m.new_tokens == 0:
        return replace(m, modeled_cost=0.0, modeled_tokens_per_s=0.0, modeled_verify_cost=0.0)
    prefill = profile.prefill_time(kept_layers, m.prefills, m.prefill_tokens)
    verify = sum(n * profile.verify_time(kept_layers, i + 1) for i, n in enumerate(m.chunk_counts))
    draft = m.target_forwards * cost.per_step + (m.verified_tokens - m.target_forwards) * cost.per_token
    seconds = (prefill + verify + draft) / m.new_tokens
    return replace(m, modeled_cost=seconds, modeled_tokens_per_s=1.0 / seconds if seconds > 0 else 0.0,
                   modeled_verify_cost=verify / max(m.target_forwards, 1))


class Pricer:
    """Prices one job's measurements: `profile` (the target's), `num_layers` (the target's), and the
    drafter `make_drafter(vocab_size)` builds (its cost measured once per vocabulary size)."""

    def __init__(self, profile: CostProfile, num_layers: int, make_drafter: Callable[[int | None], ConfiguredDrafter | None]):
        self.profile = profile
        self.num_layers = num_layers
        self.make_drafter = make_drafter
        self._draft_costs: dict[int | None, DraftCost] = {}

    def draft_cost(self, vocab_size: int | None) -> DraftCost:
        """The drafter's modeled cost with the vocabulary of `vocab_size` (None: its own), once per size."""
        if vocab_size not in self._draft_costs:
            self._draft_costs[vocab_size] = draft_cost(self.make_drafter(vocab_size), self.profile)
        return self._draft_costs[vocab_size]

    def price(self, candidate: Candidate, measurement: Measurement) -> Measurement:
        """`measurement` with its modeled cost under `candidate` (its skip set and vocabulary)."""
        kept = self.num_layers - len(candidate.skip_layers)
        return price(measurement, self.profile, kept, self.draft_cost(candidate.vocab_size))

    def with_modeled_terms(self, timing: SideBySide, candidates: Sequence[Candidate | None]) -> SideBySide:
        """`timing` with each configuration's modeled cost beside its measured terms (`candidates` in the
        timing's order, None for plain decoding): the profile pricing the very steps that were timed
        (their prefill, chunk and token counts), so a gap between `modeled_ms_per_token` and
        `ms_per_token` is the model's own, not a difference in reply or accept lengths."""
        terms = []
        for c, measured in zip(candidates, timing.terms):
            counts = Measurement(accept_length=0.0, metric=None, modeled_cost=0.0, flops_fraction=1.0,
                                 modeled_tokens_per_s=0.0, new_tokens=measured["tokens"],
                                 target_forwards=measured["steps"], wall_time_s=0.0,
                                 verified_tokens=measured["verified_tokens"], chunk_counts=tuple(measured["chunk_counts"]),
                                 prefills=measured["prefills"], prefill_tokens=measured["prefill_tokens"])
            kept = self.num_layers - (0 if c is None else len(c.skip_layers))
            priced = price(counts, self.profile, kept, DraftCost() if c is None else self.draft_cost(c.vocab_size))
            per_token = 1000 / max(counts.new_tokens, 1)
            verify = priced.modeled_verify_cost * counts.target_forwards * per_token
            prefill = self.profile.prefill_time(kept, counts.prefills, counts.prefill_tokens) * per_token
            terms.append({**measured, "modeled_ms_per_token": 1000 * priced.modeled_cost,
                          "modeled_prefill_ms_per_token": prefill, "modeled_verify_ms_per_token": verify,
                          "modeled_draft_ms_per_token": 1000 * priced.modeled_cost - verify - prefill})
        return replace(timing, terms=tuple(terms))

    def draft_share(self, skip_layers: Sequence[int], num_draft_tokens: int) -> float:
        """Modeled share of one speculative step the full-vocabulary drafter takes: `num_draft_tokens`
        drafts, then one verification of them under `skip_layers`."""
        cost = self.draft_cost(None)
        draft = cost.per_step + num_draft_tokens * cost.per_token
        verify = self.profile.verify_time(self.num_layers - len(skip_layers), num_draft_tokens + 1)
        return draft / (draft + verify) if draft + verify > 0 else 0.0

    def verification_costs(self, up_to: int = 128) -> tuple[float, ...]:
        """The dense target's verification of n inputs over a one-token forward, n = 1 .. `up_to` (what a
        sized draft tree is sized by)."""
        one = self.profile.verify_time(self.num_layers, 1)
        return tuple(self.profile.verify_time(self.num_layers, n) / one for n in range(1, up_to + 1))
