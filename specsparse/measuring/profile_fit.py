"""A cost profile and how it is made: the model of a forward's time, the timing of target forwards and
the fit of that model to them, and the checks a fit must pass before it prices anything.

Searches never decide on a wall-clock timing taken while measuring (a busy machine would decide the
selection). They price a measurement's counts with a profile instead (`specsparse.measuring.profile`
stores, pins and prices with it):

    time per generated token = (prefill time + draft time + verify time) / new tokens
    prefill time = sum over prompts of p(L, P)       P = prompt tokens prefilled
    p(L, P)     = e + f*L + P*(g + h*L)              (a forward of the whole prompt: its own regime)
    verify time = sum over steps of t(L, C)          L = kept target layers, C = tokens verified
    t(L, 1)     = a1 + b1*L                          (one token: matrix-vector products)
    t(L, C > 1) = max(t(L, 1), a + b*L + C*(c + d*L))  (matrix-matrix products, a different regime;
                                                       never below one token's: the two regimes are
                                                       fitted apart and may cross within timing noise)
    draft time  = steps * drafter step time + drafted tokens * draft-model time per token

Timing (`measure_unchecked_profile`). Target forwards on a grid of kept-layer counts and chunk lengths,
at a fixed context length, and prefills of PREFILL_TOKENS prompt tokens from an empty cache, are timed
in interleaved rounds (every cell once per round, so drift hits every cell alike), and each cell keeps
its fastest repeat: load only ever adds time, so the fastest repeat is the least disturbed one, where a
median moves as soon as most repeats are slowed. The coefficients come from relative non-negative least
squares over those cells (every cell counts alike, and no coefficient goes below zero). `fit_timings` is that estimator and fit, a pure function of the
raw timings.

Checks (`profile_checks`): every coefficient >= 0, every prediction positive, modeled cost never
falling as kept layers grow at any chunk length or as the chunk grows at any kept count, and a fit
that reproduces its own cells (`RESIDUAL_MEDIAN`, `RESIDUAL_MAX`).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from specsparse.decoding.forward_path import forward_path_of, is_fast, linear_map
from specsparse.decoding.lean_step import lean_step_of
from specsparse.decoding.session import ModelSession
from specsparse.util import content_hash, utc_now

log = logging.getLogger(__name__)

SCHEMA = 3  # 2: fastest-repeat cells, non-negative fit, measured_at and load_average recorded; 3: prefill
CHUNKS = (1, 2, 4, 6, 8)
CONTEXT = 128
PREFILL_TOKENS = (64, 256)  # prompt lengths whose prefill is timed (the verify chunks stop at 8 tokens)
# A small, fast model gets more timing rounds than `repeats`, up to this many seconds of timing (at most
# MAX_ROUNDS): its cells last about a scheduler time slice, and the fastest repeat needs more chances to
# land in a quiet moment.
MIN_TIMING_S = 2.0
MAX_ROUNDS = 50
RESIDUAL_MEDIAN = 0.25  # the fit's median and largest relative error over its own cells
RESIDUAL_MAX = 0.5
# Errors relative to at least this: forwards of a few milliseconds or less (tiny test models) are
# mostly scheduler jitter, whose size does not shrink with them; a millisecond there ranks nothing.
RESIDUAL_FLOOR_S = 0.002
# A profile is timed only while this process gets at least this share of the CPU its torch threads ask
# for (`cpu_share`): beside three busy processes on 2 cores it gets about 0.4, alone about 1.
MIN_CPU_SHARE = 0.6


@dataclass(frozen=True)
class CostProfile:
    identity: dict
    num_layers: int
    vocab_size: int
    single: tuple[float, float]  # (a1, b1), seconds: one-token forwards (see the module docstring)
    verify: tuple[float, float, float, float]  # (a, b, c, d), seconds: forwards of two or more tokens
    head_per_row: float  # seconds per LM-head row for one token
    prefill: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # (e, f, g, h), seconds: a prompt's prefill
    samples: tuple[tuple[int, int, float], ...] = ()  # (kept layers, chunk, fastest seconds)
    prefill_samples: tuple[tuple[int, int, float], ...] = ()  # (kept layers, prompt tokens, fastest seconds)
    drafter_step_s: dict[str, float] = field(default_factory=dict)
    measured_at: str | None = None  # UTC, when the timing started
    load_average: tuple[float, float, float] | None = None  # os.getloadavg() then
    cpu_share: tuple[float, float] | None = None  # `cpu_share` before and after the timing
    allowed_busy: bool = False  # measured although `cpu_share` was below MIN_CPU_SHARE (`--allow-busy`)
    schema: int = SCHEMA
    path: str = field(default="", compare=False)  # the file it was read from or stored in (not in the file)

    def verify_time(self, kept_layers: int, chunk: int) -> float:
        a1, b1 = self.single
        one = a1 + b1 * kept_layers
        if chunk == 1:
            return one
        a, b, c, d = self.verify
        return max(one, a + b * kept_layers + chunk * (c + d * kept_layers))

    def prefill_time(self, kept_layers: int, prefills: int, tokens: int) -> float:
        """Seconds of `prefills` prefills of `tokens` prompt tokens in all, under `kept_layers`."""
        e, f, g, h = self.prefill
        return prefills * (e + f * kept_layers) + tokens * (g + h * kept_layers)

    def head_time(self, rows: int) -> float:
        return self.head_per_row * rows

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if k != "path"}, indent=2)


# Config fields that say where a model was loaded from or what wrote its config, not what it computes: a
# profile pinned on one machine prices the same model converted into another cache folder.
NOT_ARCHITECTURE = ("_name_or_path", "transformers_version")


def model_identity(model: PreTrainedModel) -> dict:
    """What the timing of a forward depends on (not the weights' values, nor where they were loaded from)."""
    config = {k: v for k, v in model.config.to_dict().items() if k not in NOT_ARCHITECTURE}
    return {
        "architecture": content_hash(config),
        "dtype": str(model.dtype),
        "device": str(model.device),
        "forward_path": forward_path_of(model),
        "decode_step": "modules" if (lean := lean_step_of(model)) is None else lean.kind,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


# -- checks ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def profile_checks(profile: CostProfile) -> list[Check]:
    """Every check a profile must pass before it prices anything (see the module docstring)."""
    coefficients = {"a1": profile.single[0], "b1": profile.single[1], **dict(zip("abcd", profile.verify)),
                    **dict(zip("efgh", profile.prefill)),
                    "head_per_row": profile.head_per_row,
                    **{f"drafter_step_s[{k}]": v for k, v in profile.drafter_step_s.items()}}
    negative = [f"{name}={value:.3g}" for name, value in coefficients.items() if not value >= 0]  # NaN too
    kept = range(1, profile.num_layers + 1)
    chunks = range(1, max(CHUNKS) + 1)
    t = {(k, c): profile.verify_time(k, c) for k in kept for c in chunks}
    not_positive = [(k, c) for (k, c), v in t.items() if not v > 0]
    by_kept = [(c, fall) for c in chunks if (fall := _fall([(k, t[k, c]) for k in kept]))]
    by_chunk = [(k, fall) for k in kept if (fall := _fall([(c, t[k, c]) for c in chunks]))]
    errors = sorted([abs(profile.verify_time(k, c) - s) / max(s, RESIDUAL_FLOOR_S) for k, c, s in profile.samples if s > 0]
                    + [abs(profile.prefill_time(k, 1, n) - s) / max(s, RESIDUAL_FLOOR_S)
                       for k, n, s in profile.prefill_samples if s > 0])
    fits = bool(errors) and errors[len(errors) // 2] <= RESIDUAL_MEDIAN and errors[-1] <= RESIDUAL_MAX

    def fall_detail(falls: list, what: str, at: str) -> str:
        if not falls:
            return f"never falls as {what} grow"
        where, (low, high, before, after) = falls[0]
        return f"falls from {low} to {high} {what} at {at} {where}: {1000 * before:.3g} -> {1000 * after:.3g} ms"

    return [
        Check("coefficients >= 0", not negative, ", ".join(negative) or "all >= 0"),
        Check("predictions > 0", not not_positive,
              f"t(L={not_positive[0][0]}, C={not_positive[0][1]}) <= 0" if not_positive else "all > 0"),
        Check("rises with kept layers", not by_kept, fall_detail(by_kept, "kept layers", "chunk")),
        Check("rises with chunk length", not by_chunk, fall_detail(by_chunk, "tokens", "kept layers")),
        Check("fits its cells", fits,
              f"median error {errors[len(errors) // 2]:.1%}, largest {errors[-1]:.1%}" if errors else "no timed cells"),
    ]


def _fall(points: Sequence[tuple[int, float]]) -> tuple[int, int, float, float] | None:
    """(x before, x after, cost before, cost after) of the first point whose cost is below the
    highest cost before it; None when there is none."""
    top_x, top = points[0]
    for x, value in points[1:]:
        if value < top:
            return top_x, x, top, value
        if value > top:
            top_x, top = x, value
    return None


# -- timing and fitting ---------------------------------------------------------------------------
def fastest_repeat(repeats: Sequence[float]) -> float:
    """A cell's cost from its repeats: the fastest (load only adds time)."""
    return min(repeats)


def fit_timings(times: Mapping[tuple[int, int], Sequence[float]],
                prefills: Mapping[tuple[int, int], Sequence[float]] | None = None) -> dict[str, Any]:
    """The cost model fitted to raw timings {(kept layers, chunk): seconds of each repeat} and, when
    given, prefill timings {(kept layers, prompt tokens): seconds}: the CostProfile fields `single`,
    `verify`, `samples`, `prefill` and `prefill_samples`. Pure: nothing is timed here."""
    cells = [(k, c, fastest_repeat(t)) for (k, c), t in sorted(times.items())]
    single = _fit([(k, t) for k, c, t in cells if c == 1], lambda k: [1.0, k])
    bilinear = lambda kc: [1.0, kc[0], kc[1], kc[0] * kc[1]]  # noqa: E731
    chunked = _fit([((k, c), t) for k, c, t in cells if c > 1], bilinear)
    fitted = {"single": single, "verify": chunked, "samples": tuple((int(k), int(c), float(t)) for k, c, t in cells)}
    if prefills:
        prefill_cells = [(k, n, fastest_repeat(t)) for (k, n), t in sorted(prefills.items())]
        fitted.update(prefill=_fit([((k, n), t) for k, n, t in prefill_cells], bilinear),
                      prefill_samples=tuple((int(k), int(n), float(t)) for k, n, t in prefill_cells))
    return fitted


def _fit(cells: Sequence[tuple[Any, float]], features: Callable[[Any], list[float]]) -> tuple[float, ...]:
    """Relative least squares (every cell counts alike, not only the slowest) of time ~ features, with
    every coefficient >= 0."""
    design = np.array([features(x) for x, _ in cells], dtype=float)
    times = np.array([t for _, t in cells], dtype=float)
    return tuple(float(v) for v in _nnls(design / times[:, None], np.ones_like(times)))


def _nnls(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """argmin |design @ x - target| over x >= 0: the best of the unconstrained fits, over every subset
    of the columns, whose coefficients are all >= 0 (exact; a handful of columns make it cheap)."""
    n = design.shape[1]
    best, best_error = np.zeros(n), float(target @ target)
    for size in range(1, n + 1):
        for columns in map(list, itertools.combinations(range(n), size)):
            x = np.linalg.lstsq(design[:, columns], target, rcond=None)[0]
            error = float(np.sum((design[:, columns] @ x - target) ** 2))
            if (x >= 0).all() and error < best_error:
                best, best_error = np.zeros(n), error
                best[columns] = x
    return best


def measure_unchecked_profile(model: PreTrainedModel, repeats: int = 7, seed: int = 0,
                              progress: bool = False) -> CostProfile:
    """Time target forwards on a grid of (kept layers, chunk length) and fit the verify model; the
    profile is not checked (`specsparse.measuring.profile.measure_checked_profile` is what prices)."""
    load_average, measured_at = os.getloadavg(), utc_now()
    if load_average[0] > (os.cpu_count() or 1):
        log.warning("measuring the cost profile on a busy machine (load average %.1f, %d cores): each cell "
                    "keeps its fastest repeat, but a quiet machine measures best", load_average[0], os.cpu_count())
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
        sessions[num_layers - len(skip)] = session
    times: dict[tuple[int, int], list[float]] = {(k, c): [] for k in sessions for c in CHUNKS}
    prompt = torch.randint(0, vocab, (max(PREFILL_TOKENS),), generator=generator).tolist()
    empty = {kept: ModelSession(model, session.skip_layers) for kept, session in sessions.items()}
    prefills: dict[tuple[int, int], list[float]] = {(k, n): [] for k in sessions for n in PREFILL_TOKENS}

    def one_round() -> float:
        for (kept, chunk), samples in times.items():  # interleaved: drift hits every cell alike
            session = sessions[kept]
            start = time.perf_counter()
            session.forward(context[:chunk])
            samples.append(time.perf_counter() - start)
            session.rollback(CONTEXT)
        for (kept, tokens), samples in prefills.items():  # a prompt's prefill, from an empty cache
            start = time.perf_counter()
            empty[kept].prefill(prompt[:tokens])
            samples.append(time.perf_counter() - start)
            empty[kept].rollback(0)
        return sum(samples[-1] for cells in (times, prefills) for samples in cells.values())

    with torch.inference_mode():
        warm_up = one_round()
        for samples in (*times.values(), *prefills.values()):  # the warm-up round is dropped
            samples.clear()
        rounds = max(repeats, min(MAX_ROUNDS, math.ceil(MIN_TIMING_S / max(warm_up, 1e-9))))
        for _ in tqdm(range(rounds), desc="cost profile", unit="round", disable=not progress, leave=False):
            one_round()
    hidden = torch.randn(1, model.get_output_embeddings().weight.shape[1], generator=generator).to(model.dtype)
    weight = model.get_output_embeddings().weight.detach()
    with torch.inference_mode():  # heads of that many rows, as a trimmed head runs on the model's path
        rows = [vocab // 8, vocab]
        heads = [linear_map(weight[:r], fast=is_fast(model)) for r in rows]
        head = [_fastest_time(lambda h=h: h(hidden), repeats) for h in heads]
    head_per_row = max((head[1] - head[0]) / (rows[1] - rows[0]), 0.0)
    return CostProfile(
        identity=model_identity(model), num_layers=num_layers, vocab_size=vocab,
        **fit_timings(times, prefills), head_per_row=float(head_per_row),
        measured_at=measured_at, load_average=tuple(round(v, 2) for v in load_average),
    )


def cpu_share(seconds: float = 0.25) -> float:
    """The share of the CPU this process's torch threads get: its CPU time over wall time x threads,
    while every thread multiplies matrices for `seconds` (1.0: each thread ran all the time; other
    busy processes on the same cores lower it, whatever the load average says)."""
    threads = torch.get_num_threads()
    a = torch.randn(384, 384)
    wall, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        a @ a
    return (time.process_time() - cpu) / ((time.perf_counter() - wall) * threads)


def _fastest_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return fastest_repeat(times[1:])
