"""Cost profile: modeled time of verification and drafting, measured once per machine setting.

Searches never decide on a wall-clock timing taken while measuring (a busy machine would decide the
selection). They price a measurement's counts with this profile instead:

    time per generated token = (draft time + verify time) / new tokens
    verify time = sum over steps of t(L, C)          L = kept target layers, C = tokens verified
    t(L, 1)     = a1 + b1*L                          (one token: matrix-vector products)
    t(L, C > 1) = max(t(L, 1), a + b*L + C*(c + d*L))  (matrix-matrix products, a different regime;
                                                       never below one token's: the two regimes are
                                                       fitted apart and may cross within timing noise)
    draft time  = steps * drafter step time + drafted tokens * draft-model time per token

Measuring (`measure_profile`). Target forwards on a grid of kept-layer counts and chunk lengths, at a
fixed context length, are timed in interleaved rounds (every cell once per round, so drift hits every
cell alike), and each cell keeps its fastest repeat: load only ever adds time, so the fastest repeat
is the least disturbed one, where a median moves as soon as most repeats are slowed. The coefficients
come from relative non-negative least squares over those cells (every cell counts alike, and no
coefficient goes below zero). `fit_timings` is that estimator and fit, a pure function of the raw
timings.

Checks (`profile_checks`): every coefficient >= 0, every prediction positive, modeled cost never
falling as kept layers grow at any chunk length or as the chunk grows at any kept count, and a fit
that reproduces its own cells (`RESIDUAL_MEDIAN`, `RESIDUAL_MAX`). A profile that fails one never
prices anything: a stored one (or one of an older `SCHEMA`) is measured again; a fresh one is
measured up to `ATTEMPTS` times, then `ProfileError` says to measure on a quieter machine or to pin
one.

Storage. A profile is keyed by the model's architecture, dtype, device, thread count and torch
version and stored as JSON under `$SPECSPARSE_CACHE/profiles/` (`specsparse profile` makes or shows
one; `profile_for` makes one when none passes), with when it was measured (UTC) and the load average
then. `cost.profile=PATH` pins a file instead (`pinned_profile`): the job's process and its Ray
workers all price with it, so a sweep over many machines prices alike. `profile_record` is what a job
records of the profile that priced it (reproduce.json).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from specsparse.decoding.drafter import Drafter
from specsparse.decoding.models import cache_dir
from specsparse.decoding.session import ModelSession
from specsparse.types import Measurement
from specsparse.util import atomic_write_text, content_hash, file_sha256, first_line, utc_now

log = logging.getLogger(__name__)

SCHEMA = 2  # 2: fastest-repeat cells, non-negative fit, measured_at and load_average recorded
CHUNKS = (1, 2, 4, 6, 8)
CONTEXT = 128
ATTEMPTS = 3  # fresh measurements before a profile that keeps failing its checks is refused
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
FIX = "measure one on a quieter machine with `specsparse profile --force`, or pin one with cost.profile=PATH"
FIX_FILE = "give a profile `specsparse profile` wrote (it prints the path), or measure one with `specsparse profile --force`"


class ProfileError(ValueError):
    """A cost profile that cannot price: unreadable, malformed, of an older format, of another model,
    or failing its checks. The message is one line naming the problem and the fix."""


@dataclass(frozen=True)
class CostProfile:
    identity: dict
    num_layers: int
    vocab_size: int
    single: tuple[float, float]  # (a1, b1), seconds: one-token forwards (see the module docstring)
    verify: tuple[float, float, float, float]  # (a, b, c, d), seconds: forwards of two or more tokens
    head_per_row: float  # seconds per LM-head row for one token
    samples: tuple[tuple[int, int, float], ...] = ()  # (kept layers, chunk, fastest seconds)
    drafter_step_s: dict[str, float] = field(default_factory=dict)
    measured_at: str | None = None  # UTC, when the timing started
    load_average: tuple[float, float, float] | None = None  # os.getloadavg() then
    schema: int = SCHEMA
    path: str = field(default="", compare=False)  # the file it was read from or stored in (not in the file)

    def verify_time(self, kept_layers: int, chunk: int) -> float:
        a1, b1 = self.single
        one = a1 + b1 * kept_layers
        if chunk == 1:
            return one
        a, b, c, d = self.verify
        return max(one, a + b * kept_layers + chunk * (c + d * kept_layers))

    def head_time(self, rows: int) -> float:
        return self.head_per_row * rows

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if k != "path"}, indent=2)


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


# -- checks ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def profile_checks(profile: CostProfile) -> list[Check]:
    """Every check a profile must pass before it prices anything (see the module docstring)."""
    coefficients = {"a1": profile.single[0], "b1": profile.single[1], **dict(zip("abcd", profile.verify)),
                    "head_per_row": profile.head_per_row,
                    **{f"drafter_step_s[{k}]": v for k, v in profile.drafter_step_s.items()}}
    negative = [f"{name}={value:.3g}" for name, value in coefficients.items() if not value >= 0]  # NaN too
    kept = range(1, profile.num_layers + 1)
    chunks = range(1, max(CHUNKS) + 1)
    t = {(k, c): profile.verify_time(k, c) for k in kept for c in chunks}
    not_positive = [(k, c) for (k, c), v in t.items() if not v > 0]
    by_kept = [(c, fall) for c in chunks if (fall := _fall([(k, t[k, c]) for k in kept]))]
    by_chunk = [(k, fall) for k in kept if (fall := _fall([(c, t[k, c]) for c in chunks]))]
    errors = sorted(abs(profile.verify_time(k, c) - s) / max(s, RESIDUAL_FLOOR_S) for k, c, s in profile.samples if s > 0)
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


def check_profile(profile: CostProfile) -> CostProfile:
    """`profile` when it passes every check; ProfileError naming the first failure otherwise."""
    failed = [c for c in profile_checks(profile) if not c.passed]
    if failed:
        raise ProfileError(f"cost profile {profile.path or '(just measured)'}: {failed[0].name} fails "
                           f"({failed[0].detail}): {FIX}")
    return profile


# -- storage ---------------------------------------------------------------------------------------
_PROFILES: dict[str, CostProfile] = {}  # by file path: stored profiles, pinned ones, this process's


def load_profile(path: str | os.PathLike, text: str | None = None) -> CostProfile:
    """The checked profile stored at `path` (or given as its `text`). ProfileError (one line) when it
    cannot be read, is malformed, of an older format, or fails a check."""
    path = Path(path)
    try:
        data = json.loads(path.read_text() if text is None else text)
    except OSError as err:
        raise ProfileError(f"cost profile {path}: cannot read it ({err.strerror or err}): {FIX_FILE}") from None
    except ValueError as err:  # invalid JSON or not UTF-8
        raise ProfileError(f"cost profile {path}: not valid JSON ({first_line(err)}): {FIX_FILE}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema", 1) if isinstance(data, dict) else "none"  # files before formats were numbered: 1
        raise ProfileError(f"cost profile {path}: format {found}, not this version's format {SCHEMA} (an older "
                           f"profile, or not one): {FIX_FILE}")
    try:
        data.update(single=tuple(float(v) for v in data["single"]), verify=tuple(float(v) for v in data["verify"]),
                    samples=tuple((int(k), int(c), float(t)) for k, c, t in data["samples"]),
                    load_average=None if data.get("load_average") is None else tuple(data["load_average"]),
                    head_per_row=float(data["head_per_row"]), num_layers=int(data["num_layers"]))
        profile = CostProfile(**data, path=str(path))
        if len(profile.single) != 2 or len(profile.verify) != 4 or not isinstance(profile.identity, dict):
            raise ValueError("single needs 2 coefficients, verify 4, identity a mapping")
    except (KeyError, TypeError, ValueError) as err:
        raise ProfileError(f"cost profile {path}: malformed ({first_line(err)}): {FIX_FILE}") from None
    return check_profile(profile)


def save_profile(profile: CostProfile) -> CostProfile:
    """Store `profile` as this machine's profile for its identity; returns it with its path."""
    path = profile_path(profile.identity)
    profile = replace(profile, path=str(path))
    atomic_write_text(path, profile.to_json())
    _PROFILES[str(path)] = profile
    return profile


def profile_for(model: PreTrainedModel, progress: bool = False) -> CostProfile:
    """This machine's profile of `model`: the stored one when it passes its checks, otherwise (none,
    an older format, a failed check) one measured, checked and stored now."""
    path = profile_path(model_identity(model))
    if str(path) not in _PROFILES:
        profile = None
        if path.is_file():
            try:
                profile = load_profile(path)
            except ProfileError as err:
                log.warning("not using the stored cost profile (%s); measuring it again", err)
        if profile is None:
            log.info("measuring the cost profile of this model (once per machine setting) -> %s", path)
            profile = save_profile(measure_checked_profile(model, progress=progress))
        _PROFILES[str(path)] = profile
    return _PROFILES[str(path)]


def pinned_profile(path: str | os.PathLike, model: PreTrainedModel, text: str | None = None) -> CostProfile:
    """The pinned profile at `path` (or its `text`, for a process whose machine lacks the file), checked,
    for `model`: ProfileError when it was measured on another architecture. Read once per process."""
    key = str(path)
    if key not in _PROFILES:
        _PROFILES[key] = load_profile(path, text)
    profile, identity = _PROFILES[key], model_identity(model)
    if profile.identity.get("architecture") != identity["architecture"]:
        config = model.config
        raise ProfileError(
            f"cost.profile={path} was measured on a model of another architecture (this one: {config.model_type}, "
            f"{config.num_hidden_layers} layers, hidden size {config.hidden_size}, vocab {config.vocab_size}): pin a "
            "profile of this model (`specsparse profile --model ...` writes one and prints its path)"
        )
    differ = sorted(k for k in identity if profile.identity.get(k) != identity[k])
    if differ:
        log.info("pinned cost profile %s was measured with another %s than this process: pricing with it as it is",
                 path, "/".join(differ))
    return profile


def profile_record(profile: CostProfile) -> dict[str, Any]:
    """What identifies the profile that priced a job (JSON-able): its file and sha256, coefficients,
    when and under what load it was measured, the identity it was measured for, and its checks."""
    path = Path(profile.path) if profile.path else None
    checks = profile_checks(profile)
    return {
        "path": profile.path or None,
        "sha256": file_sha256(path) if path is not None and path.is_file() else None,
        "schema": profile.schema,
        "measured_at": profile.measured_at,
        "load_average": None if profile.load_average is None else list(profile.load_average),
        "identity": dict(profile.identity),
        "coefficients": {"single": list(profile.single), "verify": list(profile.verify),
                         "head_per_row": profile.head_per_row, "drafter_step_s": dict(profile.drafter_step_s)},
        "checks": {c.name: c.passed for c in checks},
        "checks_passed": all(c.passed for c in checks),
    }


# -- measuring -------------------------------------------------------------------------------------
def measure_checked_profile(model: PreTrainedModel, attempts: int = ATTEMPTS, progress: bool = False) -> CostProfile:
    """`measure_profile` until one passes its checks; ProfileError after `attempts` failures."""
    for attempt in range(1, attempts + 1):
        profile = measure_profile(model, progress=progress)
        failed = [c for c in profile_checks(profile) if not c.passed]
        if not failed:
            return profile
        log.warning("cost profile, attempt %d of %d: %s fails (%s)", attempt, attempts, failed[0].name, failed[0].detail)
    raise ProfileError(f"the cost profile measured for this model failed its checks {attempts} times "
                       f"({failed[0].name}: {failed[0].detail}): {FIX}")


def _cell_time(repeats: Sequence[float]) -> float:
    """A cell's cost from its repeats: the fastest (load only adds time)."""
    return min(repeats)


def fit_timings(times: Mapping[tuple[int, int], Sequence[float]]) -> dict[str, Any]:
    """The verify model fitted to raw timings {(kept layers, chunk): seconds of each repeat}: the
    CostProfile fields `single`, `verify` and `samples`. Pure: nothing is timed here."""
    cells = [(k, c, _cell_time(t)) for (k, c), t in sorted(times.items())]
    single = _fit([(k, t) for k, c, t in cells if c == 1], lambda k: [1.0, k])
    chunked = _fit([((k, c), t) for k, c, t in cells if c > 1], lambda kc: [1.0, kc[0], kc[1], kc[0] * kc[1]])
    return {"single": single, "verify": chunked, "samples": tuple((int(k), int(c), float(t)) for k, c, t in cells)}


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


def measure_profile(model: PreTrainedModel, repeats: int = 7, seed: int = 0, progress: bool = False) -> CostProfile:
    """Time target forwards on a grid of (kept layers, chunk length) and fit the verify model
    (unchecked: see `measure_checked_profile`)."""
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

    def one_round() -> float:
        for (kept, chunk), samples in times.items():  # interleaved: drift hits every cell alike
            session = sessions[kept]
            start = time.perf_counter()
            session.forward(context[:chunk])
            samples.append(time.perf_counter() - start)
            session.rollback(CONTEXT)
        return sum(samples[-1] for samples in times.values())

    with torch.inference_mode():
        warm_up = one_round()
        for samples in times.values():  # the warm-up round is dropped
            samples.clear()
        rounds = max(repeats, min(MAX_ROUNDS, math.ceil(MIN_TIMING_S / max(warm_up, 1e-9))))
        for _ in tqdm(range(rounds), desc="cost profile", unit="round", disable=not progress, leave=False):
            one_round()
    hidden = torch.randn(1, model.get_output_embeddings().weight.shape[1], generator=generator).to(model.dtype)
    weight = model.get_output_embeddings().weight.detach()
    with torch.inference_mode():
        rows = [vocab // 8, vocab]
        head = [_fastest_time(lambda r=r: torch.nn.functional.linear(hidden, weight[:r]), repeats) for r in rows]
    head_per_row = max((head[1] - head[0]) / (rows[1] - rows[0]), 0.0)
    return CostProfile(
        identity=model_identity(model), num_layers=num_layers, vocab_size=vocab,
        **fit_timings(times), head_per_row=float(head_per_row),
        measured_at=measured_at, load_average=tuple(round(v, 2) for v in load_average),
    )


def _fastest_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return _cell_time(times[1:])


@dataclass(frozen=True)
class DraftCost:
    per_step: float = 0.0  # seconds per verification step (a token drafter's propose + observe)
    per_token: float = 0.0  # seconds per drafted token (an LM drafter's forward)


def draft_cost(drafter: Drafter | None, profile: CostProfile, repeats: int = 32) -> DraftCost:
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


def _drafter_step_time(drafter: Drafter, vocab: int, repeats: int, k: int = STEP_DRAFT_TOKENS, rounds: int = 1) -> float:
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
    return _cell_time(medians)


def price(m: Measurement, profile: CostProfile, kept_layers: int, cost: DraftCost) -> Measurement:
    """`m` with `modeled_cost` (s/token), `modeled_tokens_per_s` and `modeled_verify_cost` (s per
    verification step) from its step counts (`chunk_counts[i]`: steps that verified i + 1 tokens)."""
    if m.new_tokens == 0:
        return replace(m, modeled_cost=0.0, modeled_tokens_per_s=0.0, modeled_verify_cost=0.0)
    verify = sum(n * profile.verify_time(kept_layers, i + 1) for i, n in enumerate(m.chunk_counts))
    draft = m.target_forwards * cost.per_step + (m.verified_tokens - m.target_forwards) * cost.per_token
    seconds = (verify + draft) / m.new_tokens
    return replace(m, modeled_cost=seconds, modeled_tokens_per_s=1.0 / seconds if seconds > 0 else 0.0,
                   modeled_verify_cost=verify / max(m.target_forwards, 1))
