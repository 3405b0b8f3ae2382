"""Cost profile: modeled time of verification and drafting, measured once per machine setting.

Searches never decide on a wall-clock timing taken while measuring (a busy machine would decide the
selection). They price a measurement's counts with this profile instead:

    time per generated token = (draft time + verify time) / new tokens
    verify time = sum over steps of t(L, C)          L = kept target layers, C = tokens verified
    t(L, 1)     = a1 + b1*L                          (one token: matrix-vector products)
    t(L, C > 1) = a + b*L + C*(c + d*L)              (matrix-matrix products, a different regime)
    draft time  = steps * drafter step time + drafted tokens * draft-model time per token

The coefficients come from least squares over the medians of interleaved, repeated target forwards
on a grid of kept-layer counts and chunk lengths, at a fixed context length. Measure it on a quiet
machine: a profile timed under load overprices everything (ratios between configurations hold better). A profile is keyed by
the model's architecture, dtype, device, thread count and torch version, and stored as JSON beside
the model cache (`specsparse profile` makes one; `profile_for` makes one when absent).
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from specsparse.decoding.models import cache_dir
from specsparse.decoding.session import ModelSession
from specsparse.drafters.base import Drafter
from specsparse.types import Measurement
from specsparse.util import atomic_write_text, content_hash

log = logging.getLogger(__name__)

CHUNKS = (1, 2, 4, 6, 8)
CONTEXT = 128


@dataclass(frozen=True)
class CostProfile:
    identity: dict
    num_layers: int
    vocab_size: int
    single: tuple[float, float]  # (a1, b1), seconds: one-token forwards (see the module docstring)
    verify: tuple[float, float, float, float]  # (a, b, c, d), seconds: forwards of two or more tokens
    head_per_row: float  # seconds per LM-head row for one token
    samples: tuple[tuple[int, int, float], ...] = ()  # (kept layers, chunk, median seconds)
    drafter_step_s: dict[str, float] = field(default_factory=dict)

    def verify_time(self, kept_layers: int, chunk: int) -> float:
        if chunk == 1:
            a1, b1 = self.single
            return a1 + b1 * kept_layers
        a, b, c, d = self.verify
        return a + b * kept_layers + chunk * (c + d * kept_layers)

    def head_time(self, rows: int) -> float:
        return self.head_per_row * rows


def model_identity(model: PreTrainedModel) -> dict:
    """What the timing of a forward depends on (not the weights' values)."""
    return {
        "architecture": content_hash(model.config.to_dict()),
        "dtype": str(model.dtype),
        "device": str(model.device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def profile_path(identity: dict) -> Path:
    return cache_dir() / "profiles" / f"{content_hash(identity)}.json"


_PROFILES: dict[str, CostProfile] = {}


def profile_for(model: PreTrainedModel, progress: bool = False) -> CostProfile:
    """The model's stored profile, measured and stored first when there is none."""
    identity = model_identity(model)
    key = content_hash(identity)
    if key not in _PROFILES:
        path = profile_path(identity)
        if path.is_file():
            data = json.loads(path.read_text())
            data["samples"] = tuple(tuple(s) for s in data["samples"])
            data["verify"], data["single"] = tuple(data["verify"]), tuple(data["single"])
            _PROFILES[key] = CostProfile(**data)
        else:
            log.info("measuring the cost profile of this model (once per machine setting) -> %s", path)
            _PROFILES[key] = measure_profile(model)
            save_profile(_PROFILES[key])
    return _PROFILES[key]


def save_profile(profile: CostProfile) -> Path:
    path = profile_path(profile.identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(asdict(profile), indent=2))
    _PROFILES[content_hash(profile.identity)] = profile
    return path


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_profile(model: PreTrainedModel, repeats: int = 7, seed: int = 0) -> CostProfile:
    """Time target forwards on a grid of (kept layers, chunk length) and fit the verify model."""
    num_layers = model.config.num_hidden_layers
    vocab = model.get_output_embeddings().weight.shape[0]
    kept_grid = sorted({1, max(1, num_layers // 3), max(1, 2 * num_layers // 3), num_layers})
    generator = torch.Generator().manual_seed(seed)
    context = torch.randint(0, vocab, (CONTEXT,), generator=generator).tolist()
    sessions = {}
    for kept in kept_grid:
        skip = tuple(sorted(set(range(num_layers)) - set(np.linspace(0, num_layers - 1, kept).round().astype(int).tolist())))
        session = ModelSession(model, skip)
        with torch.inference_mode():
            session.prefill(context)
        sessions[len(range(num_layers)) - len(skip)] = session
    times: dict[tuple[int, int], list[float]] = {(k, c): [] for k in sessions for c in CHUNKS}
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first round warms up and is dropped
            for (kept, chunk), samples in times.items():  # interleaved: drift hits every cell alike
                session = sessions[kept]
                start = time.perf_counter()
                session.forward(context[:chunk])
                samples.append(time.perf_counter() - start)
                session.rollback(CONTEXT)
    medians = [(k, c, statistics.median(t[1:])) for (k, c), t in times.items()]
    single = _fit([(k, t) for k, c, t in medians if c == 1], lambda k: [1.0, k])
    chunked = _fit([((k, c), t) for k, c, t in medians if c > 1], lambda kc: [1.0, kc[0], kc[1], kc[0] * kc[1]])
    hidden = torch.randn(1, model.get_output_embeddings().weight.shape[1], generator=generator).to(model.dtype)
    weight = model.get_output_embeddings().weight.detach()
    with torch.inference_mode():
        rows = [vocab // 8, vocab]
        head = [_median_time(lambda r=r: torch.nn.functional.linear(hidden, weight[:r]), repeats) for r in rows]
    head_per_row = max((head[1] - head[0]) / (rows[1] - rows[0]), 0.0)
    return CostProfile(
        identity=model_identity(model), num_layers=num_layers, vocab_size=vocab,
        single=single, verify=chunked, head_per_row=float(head_per_row),
        samples=tuple((int(k), int(c), float(t)) for k, c, t in medians),
    )


def _fit(cells, features) -> tuple[float, ...]:
    """Relative least squares (every cell counts alike, not only the slowest) of time ~ features."""
    design = np.array([features(x) for x, _ in cells])
    times = np.array([t for _, t in cells])
    return tuple(float(v) for v in np.linalg.lstsq(design / times[:, None], np.ones_like(times), rcond=None)[0])


@dataclass(frozen=True)
class DraftCost:
    per_step: float = 0.0  # seconds per verification step (a token drafter's propose + observe)
    per_token: float = 0.0  # seconds per drafted token (an LM drafter's forward)


def draft_cost(drafter: Drafter | None, profile: CostProfile, repeats: int = 32) -> DraftCost:
    """The drafter's cost: LM drafters from their model's profile (trimmed head included), token
    drafters from their measured step time, stored in the target's profile."""
    if drafter is None:
        return DraftCost()
    model = getattr(drafter, "model", None)
    if model is not None:  # an LM drafter: one forward of its kept layers per drafted token
        own = profile_for(model)
        kept = own.num_layers - len(getattr(drafter, "skip_layers", ()))
        per_token = own.verify_time(kept, 1) - own.head_time(own.vocab_size) + own.head_time(drafter.vocab_size)
        return DraftCost(per_token=max(per_token, 0.0))
    if drafter.cost_key not in profile.drafter_step_s:
        profile.drafter_step_s[drafter.cost_key] = _drafter_step_time(drafter, profile.vocab_size, repeats)
        save_profile(profile)
    return DraftCost(per_step=profile.drafter_step_s[drafter.cost_key])


def _drafter_step_time(drafter: Drafter, vocab: int, repeats: int, k: int = 5) -> float:
    """Median propose + observe time on a repetitive synthetic context (drafts exist most steps;
    a feature drafter gets random features)."""
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(0, 64, (CONTEXT,), generator=generator).tolist()
    drafter.reset()
    drafter.begin(context)
    features = None if drafter.feature_layers is None else torch.randn(CONTEXT, drafter.feature_size, generator=generator)
    if features is not None:
        drafter.observe_features(features[:-1].to(drafter.feature_dtype))
    logits = torch.randn(k + 1, vocab, generator=generator)
    times = []
    for step in range(repeats):
        start = time.perf_counter()
        proposal = drafter.propose(k)
        committed = [context[step % CONTEXT]]
        if features is not None:
            drafter.observe_features(features[step % CONTEXT][None].to(drafter.feature_dtype))
        drafter.observe(committed, [context[-1], *proposal.tokens], logits[: len(proposal.tokens) + 1])
        times.append(time.perf_counter() - start)
    drafter.reset()
    return statistics.median(times)


def price(m: Measurement, profile: CostProfile, kept_layers: int, cost: DraftCost) -> Measurement:
    """`m` with `cost` (modeled s/token), `tokens_per_s` (modeled) and `verify_cost` (modeled s per
    verification step) from its step counts (`chunk_counts[i]`: steps that verified i + 1 tokens)."""
    if m.new_tokens == 0:
        return replace(m, cost=0.0, tokens_per_s=0.0, verify_cost=0.0)
    verify = sum(n * profile.verify_time(kept_layers, i + 1) for i, n in enumerate(m.chunk_counts))
    draft = m.target_forwards * cost.per_step + (m.verified_tokens - m.target_forwards) * cost.per_token
    seconds = (verify + draft) / m.new_tokens
    return replace(m, cost=seconds, tokens_per_s=1.0 / seconds if seconds > 0 else 0.0,
                   verify_cost=verify / max(m.target_forwards, 1))
