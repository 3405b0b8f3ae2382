"""Where cost profiles come from: this machine's stored profile or a pinned one (the model, its timing,
fit and checks are in `specsparse.measuring.profile_fit`; pricing with a profile is
`specsparse.measuring.pricing`).

A profile that fails a check never prices anything: a stored one (or one of an older `SCHEMA`) is
measured again; a fresh one is measured up to `ATTEMPTS` times (`measure_checked_profile`), then
`ProfileError` says to measure on a quieter machine or to pin one.

Storage. A profile is keyed by the model's architecture, dtype, device, thread count and torch
version and stored as JSON under `$SPECSPARSE_CACHE/profiles/` (`specsparse profile` makes or shows
one; `profile_for` makes one when none passes), with when it was measured (UTC) and the load average
then. `cost.profile=PATH` pins a file instead (`pinned_profile`): the job's process and its Ray
workers all price with it, so a sweep over many machines prices alike. `profile_record` is what a job
records of the profile that priced it (reproduce.json).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from specsparse.decoding.models import cache_dir
from specsparse.measuring.profile_fit import (
    MIN_CPU_SHARE,
    SCHEMA,
    CostProfile,
    cpu_share,
    measure_unchecked_profile,
    model_identity,
    profile_checks,
)
from specsparse.util import atomic_write_text, content_hash, file_sha256, first_line

log = logging.getLogger(__name__)

ATTEMPTS = 3  # fresh measurements before a profile that keeps failing its checks is refused
FIX = "measure one on a quieter machine with `specsparse profile --force`, or pin one with cost.profile=PATH"
BUSY_FIX = ("measure it on a quieter machine, accept the load with `specsparse profile --force --allow-busy` "
            "(recorded in the profile), or pin a profile with cost.profile=PATH")
FIX_FILE = "give a profile `specsparse profile` wrote (it prints the path), or measure one with `specsparse profile --force`"


class ProfileError(ValueError):
    """A cost profile that cannot price: unreadable, malformed, of an older format, of another model,
    or failing its checks. The message is one line naming the problem and the fix."""


def profile_path(identity: dict) -> Path:
    return cache_dir() / "profiles" / f"{content_hash(identity)}.json"


# -- checked profiles ------------------------------------------------------------------------------
def check_profile(profile: CostProfile) -> CostProfile:
    """`profile` when it passes every check; ProfileError naming the first failure otherwise."""
    failed = [c for c in profile_checks(profile) if not c.passed]
    if failed:
        raise ProfileError(f"cost profile {profile.path or '(just measured)'}: {failed[0].name} fails "
                           f"({failed[0].detail}): {FIX}")
    return profile


def measure_checked_profile(model: PreTrainedModel, attempts: int = ATTEMPTS, progress: bool = False,
                            allow_busy: bool = False) -> CostProfile:
    """`measure_unchecked_profile` until one passes its checks; ProfileError after `attempts` failures,
    or at once when the process does not get the CPU it asks for, before or after the timing
    (`cpu_share` below MIN_CPU_SHARE), unless `allow_busy`, which the profile then records."""
    for attempt in range(1, attempts + 1):
        before = _checked_cpu_share("before", allow_busy)
        profile = measure_unchecked_profile(model, progress=progress)
        after = _checked_cpu_share("after", allow_busy)
        profile = replace(profile, cpu_share=(round(before, 3), round(after, 3)),
                          allowed_busy=min(before, after) < MIN_CPU_SHARE)
        failed = [c for c in profile_checks(profile) if not c.passed]
        if not failed:
            return profile
        log.warning("cost profile, attempt %d of %d: %s fails (%s)", attempt, attempts, failed[0].name, failed[0].detail)
    raise ProfileError(f"the cost profile measured for this model failed its checks {attempts} times "
                       f"({failed[0].name}: {failed[0].detail}): {FIX}")


def _checked_cpu_share(when: str, allow_busy: bool) -> float:
    share = cpu_share()
    if share < MIN_CPU_SHARE:
        message = (f"the machine is busy: {when} timing the cost profile this process got {share:.0%} of the CPU its "
                   f"{torch.get_num_threads()} threads ask for (at least {MIN_CPU_SHARE:.0%} needed), so the profile "
                   "would price forwards by the load")
        if not allow_busy:
            raise ProfileError(f"{message}: {BUSY_FIX}")
        log.warning("%s; measuring it anyway (--allow-busy, recorded in the profile)", message)
    return share


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
                    prefill=tuple(float(v) for v in data["prefill"]),
                    samples=tuple((int(k), int(c), float(t)) for k, c, t in data["samples"]),
                    prefill_samples=tuple((int(k), int(n), float(t)) for k, n, t in data["prefill_samples"]),
                    load_average=None if data.get("load_average") is None else tuple(data["load_average"]),
                    cpu_share=None if data.get("cpu_share") is None else tuple(float(v) for v in data["cpu_share"]),
                    head_per_row=float(data["head_per_row"]), num_layers=int(data["num_layers"]))
        profile = CostProfile(**data, path=str(path))
        if len(profile.single) != 2 or len(profile.verify) != 4 or len(profile.prefill) != 4 \
                or not isinstance(profile.identity, dict):
            raise ValueError("single needs 2 coefficients, verify and prefill 4 each, identity a mapping")
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


def profile_for(model: PreTrainedModel, progress: bool = False, allow_busy: bool = False) -> CostProfile:
    """This machine's profile of `model`: the stored one when it passes its checks, otherwise (none,
    an older format, a failed check) one measured, checked and stored now (refused on a busy machine
    unless `allow_busy`: `measure_checked_profile`)."""
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
            profile = save_profile(measure_checked_profile(model, progress=progress, allow_busy=allow_busy))
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
    if "forward_path" in differ:  # the path changes what a multi-token verification costs, not only its scale
        log.warning("pinned cost profile %s was measured on the %s forward path, this job runs the %s path: its "
                    "verification costs differ (pin a profile measured with `specsparse profile --forward-path %s`)",
                    path, profile.identity.get("forward_path"), identity["forward_path"], identity["forward_path"])
    elif differ:
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
        "cpu_share": None if profile.cpu_share is None else list(profile.cpu_share),
        "allowed_busy": profile.allowed_busy,
        "identity": dict(profile.identity),
        "coefficients": {"single": list(profile.single), "verify": list(profile.verify), "prefill": list(profile.prefill),
                         "head_per_row": profile.head_per_row, "drafter_step_s": dict(profile.drafter_step_s)},
        "checks": {c.name: c.passed for c in checks},
        "checks_passed": all(c.passed for c in checks),
    }
