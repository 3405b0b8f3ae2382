"""The speculative decoding step loop: draft k tokens, verify them in one target forward, accept the
longest matching prefix, append the bonus token, roll the cache back.

Greedy verification (temperature 0) is lossless: the output equals the (possibly sparse) target's own
greedy output token for token. Sampling (temperature > 0) uses standard speculative rejection sampling
(Leviathan et al. 2023; Chen et al. 2023), so samples follow the target's distribution.

The prompt minus its last token is prefilled; every generated token then comes out of a verification
step, so the accept lengths sum to the number of new tokens and plain decoding scores exactly 1.00.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel

from specsparse.decoding.drafter import Drafter, Proposal
from specsparse.decoding.session import ModelSession
from specsparse.types import GenerationConfig, GenerationResult


def greedy_accept(
    draft: list[int], predicted: list[int], parents: tuple[int, ...] | None = None
) -> tuple[list[int], list[int]]:
    """(accepted drafts followed by the bonus token, the target inputs they came from).

    predicted: the target's greedy token after each of the inputs [last, *draft] (the argmax of its
    logits). A chain accepts its longest prefix equal to the predictions; a tree (`parents`, see
    `Proposal`) follows from the root the child that equals the prediction, as long as there is one.
    The inputs are indices into [last, *draft]: 0, then the accepted drafts' (a chain: 0..m-1)."""
    path = [0]
    committed = []
    while True:
        token = predicted[path[-1]]
        committed.append(token)
        node = path[-1] - 1  # the draft index of the current input (-1: the root)
        if parents is None:
            child = node + 1 if node + 1 < len(draft) and draft[node + 1] == token else None
        else:
            child = next((i for i in range(node + 1, len(draft)) if parents[i] == node and draft[i] == token), None)
        if child is None:
            return committed, path
        path.append(child + 1)


def sampling_accept(
    proposal: Proposal, logits: torch.Tensor, temperature: float, generator: torch.Generator
) -> list[int]:
    """Speculative rejection sampling. logits: [n+1, vocab]; proposal.probs [n, vocab] or None (one-hot)."""
    target_probs = torch.softmax(logits / temperature, dim=-1)
    committed: list[int] = []
    for i, token in enumerate(proposal.tokens):
        p = target_probs[i]
        q_token = 1.0 if proposal.probs is None else float(proposal.probs[i, token])
        if torch.rand((), generator=generator).item() * q_token < float(p[token]):
            committed.append(token)
            continue
        if proposal.probs is None:
            residual = p.clone()
            residual[token] = 0.0
        else:
            residual = torch.clamp(p - proposal.probs[i].to(p), min=0.0)
        if residual.sum() <= 0:  # p == q exactly: rejection had probability 0; keep the draft
            committed.append(token)
            continue
        committed.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
        return committed
    bonus = torch.multinomial(target_probs[len(proposal.tokens)], 1, generator=generator)
    return committed + [int(bonus)]


class AdaptiveDraftLength:
    """How many tokens to draft next (`generation.draft_length=adaptive`, a deviation from the papers'
    fixed k that keeps the output and shortens drafts that would mostly be rejected).

    Draft tokens are taken as accepted with one probability p each until the first rejection, so n
    drafts commit (1 - p^(n+1)) / (1 - p) tokens in expectation, bonus included. A verification of
    1 + n tokens is modeled as costing 1 + c*n one-token forwards (c = `verify_cost_per_token`; the
    cost profile of SmolLM2-135M fp32 on 2 CPU threads gives about 0.09). Each step drafts the
    n <= k maximising expected tokens per cost. p is the request's own acceptance rate: accepted over
    tried draft positions, counts decaying by 0.95 per step (so a request that stopped drafting
    tries again), with one prior success and one prior failure.
    """

    DECAY = 0.95

    def __init__(self, verify_cost_per_token: float):
        self.cost = verify_cost_per_token
        self.accepted = 0.0
        self.tried = 0.0

    def length(self, k: int) -> int:
        p = min((self.accepted + 1.0) / (self.tried + 2.0), 0.99)
        return max(range(k + 1), key=lambda n: (1.0 - p ** (n + 1)) / (1.0 - p) / (1.0 + self.cost * n))

    def update(self, drafted: int, accepted: int) -> None:
        """After a step that verified `drafted` draft tokens and accepted the first `accepted`."""
        self.accepted = self.accepted * self.DECAY + accepted
        self.tried = self.tried * self.DECAY + min(accepted + 1, drafted)


class Request:
    """One request's decoding state and its step rule, shared by the engine (one request at a time)
    and the batched verifier (many in lockstep), so both commit exactly the same tokens.

    Each step: `draft()` gives the target's inputs [last, *drafts]; the caller runs them through the
    target; `commit(logits)` accepts, appends the bonus token, stops at EOS or the budget, and feeds
    the drafter. The caller keeps `len(committed)` of the step's cache positions: [last, accepted drafts].
    """

    def __init__(
        self,
        prompt_ids: Sequence[int],
        drafter: Drafter | None,
        config: GenerationConfig,
        eos_token_ids: Sequence[int] = (),
    ):
        if len(prompt_ids) == 0:
            raise ValueError("empty prompt: give at least one token")
        self.drafter = drafter
        self.config = config
        self.eos = set(eos_token_ids) if config.stop_on_eos else set()
        self.generator = torch.Generator().manual_seed(config.seed) if config.temperature > 0 else None
        self.last = int(prompt_ids[-1])
        self.prefill_tokens = len(prompt_ids) - 1
        self.new_tokens: list[int] = []
        self.accept_lengths: list[int] = []
        self.verified_lengths: list[int] = []  # target inputs per step: 1 + drafted tokens
        self.done = False
        self._proposal = Proposal([])
        self._verified_ids: list[int] = []
        self.kept_inputs: list[int] = []  # after commit: the verified inputs whose cache entries stay
        self.draft_length = (
            AdaptiveDraftLength(config.verify_cost_per_token) if config.draft_length == "adaptive" else None
        )
        if drafter is not None:
            drafter.begin(list(prompt_ids))

    def draft(self) -> list[int]:
        """The target's inputs for the next step: [last committed token, *draft tokens]."""
        # Never draft past the budget: the bonus token is one more.
        budget = min(self.config.num_draft_tokens, self.config.max_new_tokens - len(self.new_tokens) - 1)
        if self.draft_length is not None:
            budget = min(budget, self.draft_length.length(self.config.num_draft_tokens))
        drafter = self.drafter
        proposal = drafter.propose(budget) if drafter is not None and budget > 0 else Proposal([])
        if proposal.parents is not None and self.generator is not None:
            raise ValueError(f"drafter {drafter.name!r} drafts trees, which verify greedily only: use temperature 0")
        if len(proposal.tokens) > budget or proposal.parents is not None:
            proposal = proposal.within(budget)
        self._proposal = proposal
        self._verified_ids = [self.last, *proposal.tokens]
        return list(self._verified_ids)

    @property
    def input_parents(self) -> tuple[int, ...] | None:
        """For a tree draft, the parent of each target input of `draft()` (-1 for the first, the last
        committed token); None for a chain."""
        parents = self._proposal.parents
        return None if parents is None else (-1, *(p + 1 for p in parents))

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The target features the drafter reads (the target session records them)."""
        return () if self.drafter is None or self.drafter.feature_layers is None else self.drafter.feature_layers

    def prefilled(self, features: torch.Tensor | None) -> None:
        """After the target's prefill of prompt[:-1]: hand its features to a feature drafter."""
        if features is not None and self.feature_layers:
            self.drafter.observe_features(features)

    def commit(
        self, logits: torch.Tensor | None, predicted: list[int] | None = None, features: torch.Tensor | None = None
    ) -> list[int]:
        """Accept from the target's logits [n+1, vocab] for the last `draft()`; return the committed tokens.

        Replay passes `predicted` (the target's greedy tokens) instead, with logits None: greedy
        acceptance reads nothing else, and only drafters that ignore logits are replayed.
        features: the target's features [n+1, F] at the step's inputs, for a feature drafter.
        """
        proposal = self._proposal
        if self.generator is None:
            predicted = logits.argmax(dim=-1).tolist() if predicted is None else predicted
            committed, self.kept_inputs = greedy_accept(proposal.tokens, predicted, proposal.parents)
        else:
            committed = sampling_accept(proposal, logits, self.config.temperature, self.generator)
            self.kept_inputs = list(range(len(committed)))
        stop_at = next((i for i, token in enumerate(committed) if token in self.eos), None)
        if stop_at is not None:
            committed = committed[: stop_at + 1]
            self.kept_inputs = self.kept_inputs[: stop_at + 1]
        self.new_tokens.extend(committed)
        self.accept_lengths.append(len(committed))
        self.verified_lengths.append(len(proposal.tokens) + 1)
        self.last = committed[-1]
        if self.draft_length is not None:
            self.draft_length.update(len(proposal.tokens), len(committed) - 1)
        self.done = stop_at is not None or len(self.new_tokens) >= self.config.max_new_tokens
        if self.drafter is not None:
            if stop_at is None:
                if features is not None and self.feature_layers:
                    self.drafter.observe_features(features[self.kept_inputs])
                self.drafter.observe(committed, self._verified_ids, logits)
            if self.done:
                self.drafter.close()
        return committed

    def result(self, **timings: float) -> GenerationResult:
        return GenerationResult(
            new_token_ids=tuple(self.new_tokens),
            accept_lengths=tuple(self.accept_lengths),
            verified_lengths=tuple(self.verified_lengths),
            prefill_tokens=self.prefill_tokens,
            **timings,
        )


def speculative_generate(
    target: PreTrainedModel,
    prompt_ids: Sequence[int],
    drafter: Drafter | None = None,
    config: GenerationConfig = GenerationConfig(),
    skip_layers: Sequence[int] = (),
    eos_token_ids: Sequence[int] = (),
    on_step: Callable[[list[int]], bool | None] | None = None,
) -> GenerationResult:
    """Generate up to `config.max_new_tokens` tokens after `prompt_ids` (chat template applied).

    drafter None (or k = 0) is plain autoregressive decoding with the same loop.
    skip_layers: target layers skipped for this request (validated; () is the dense model).
    on_step: called with the tokens committed by each verification step (for streaming); returning True
        ends generation after that step (a stop string was seen).
    """
    start = time.perf_counter()
    with torch.inference_mode():
        request = Request(prompt_ids, drafter, config, eos_token_ids)
        session = ModelSession(target, tuple(skip_layers), request.feature_layers)
        session.prefill(prompt_ids[:-1])
        request.prefilled(session.features)
        prefill_time = time.perf_counter() - start
        draft_time = verify_time = 0.0
        while not request.done:
            tick = time.perf_counter()
            verified_ids = request.draft()
            tock = time.perf_counter()
            draft_time += tock - tick
            logits = session.forward(verified_ids, request.input_parents)
            verify_time += time.perf_counter() - tock
            committed = request.commit(logits, features=session.features)
            # Keep [last, accepted drafts] in the cache; the bonus token becomes the next `last`.
            session.keep(session.length - len(verified_ids), request.kept_inputs)
            if on_step is not None and on_step(committed):
                break
    return request.result(
        draft_time_s=draft_time,
        verify_time_s=verify_time,
        wall_time_s=time.perf_counter() - start,
        prefill_time_s=prefill_time,
    )
