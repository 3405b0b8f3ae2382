"""Measured speedups: configurations timed side by side, in one process, interleaved prompt by prompt.

A speedup reported as measured comes only from here: every configuration runs the real engine on the
same prompts in the same minutes, in alternating order (ABAB on one prompt, BABA on the next), so a
slow period of the machine hits every configuration alike. Timings never enter the results store.
"""

from __future__ import annotations

import itertools
import logging
import os
import platform
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from tqdm.auto import tqdm

from specsparse.data import Domain, Example, build_messages
from specsparse.decoding.drafter import Drafter
from specsparse.decoding.generation import generate_text
from specsparse.decoding.models import LoadedModel
from specsparse.measuring.profile_fit import MIN_CPU_SHARE, cpu_share
from specsparse.types import GenerationConfig, GenerationResult


@dataclass(frozen=True)
class SideBySide:
    """Engine throughput of each configuration on the same prompts, and the speedup of every
    configuration over every earlier one, with 95% paired-bootstrap intervals over prompts.

    speedups["selected/dense"] = [point, low, high]: tokens/s of "selected" over "dense".
    accept_lengths: tokens per verification step (bonus included); draft_ms_per_step: drafting time
    per step; latency_s: mean wall time of a request with its 95% interval; same_as_first: prompts whose reply equals the first configuration's token for token.
    terms: per configuration, where its time went, in ms per generated token (`ms_per_token` is their sum:
    prefill, verification forwards, drafting, and the rest of the loop), and the counts the cost profile
    prices (`prefills`, `prefill_tokens`, `steps`, `tokens`, `verified_tokens`, `chunk_counts[i]`: steps that
    verified i + 1 tokens), over every timed prompt and repeat.
    outputs: each configuration's reply token ids per prompt (not written: `as_dict` leaves them out)."""

    labels: tuple[str, ...]
    tokens_per_s: tuple[float, ...]
    speedups: dict[str, list[float]]
    prompts: int
    accept_lengths: tuple[float, ...] = ()
    latency_s: tuple[list[float], ...] = ()  # per configuration: mean seconds per request [point, low, high]
    draft_ms_per_step: tuple[float, ...] = ()
    same_as_first: tuple[int, ...] = ()
    hardware: dict = field(default_factory=dict)  # where it was timed (`timing_hardware`)
    terms: tuple[dict, ...] = ()
    outputs: tuple[tuple[tuple[int, ...], ...], ...] = field(default=(), repr=False, compare=False)

    def speedup(self, label: str, over: str) -> list[float] | None:
        return self.speedups.get(f"{label}/{over}")

    def subset(self, labels: dict[str, str]) -> SideBySide:
        """Some of the configurations under new names ({new: old}, in the new order): the same timings,
        so no configuration needs timing twice."""
        old = list(labels.values())
        index = [self.labels.index(label) for label in old]
        names = list(labels)
        speedups = {f"{names[j]}/{names[i]}": self.speedups[f"{old[j]}/{old[i]}"]
                    for i, j in itertools.combinations(range(len(names)), 2)}
        pick = lambda values: tuple(values[i] for i in index) if values else ()  # noqa: E731
        return SideBySide(tuple(names), pick(self.tokens_per_s), speedups, self.prompts, pick(self.accept_lengths),
                          pick(self.latency_s), pick(self.draft_ms_per_step), pick(self.same_as_first),
                          self.hardware, pick(self.terms), pick(self.outputs))

    def as_dict(self) -> dict:
        return {"labels": list(self.labels), "tokens_per_s": list(self.tokens_per_s), "speedups": self.speedups,
                "prompts": self.prompts, "accept_lengths": list(self.accept_lengths),
                "latency_s": list(self.latency_s),
                "draft_ms_per_step": list(self.draft_ms_per_step), "same_as_first": list(self.same_as_first),
                "hardware": self.hardware, "terms": list(self.terms)}


log = logging.getLogger(__name__)

Runner = Callable[[Example], GenerationResult]  # generates one example's reply with the engine


def time_side_by_side(
    target: LoadedModel,
    domain: Domain,
    examples: Sequence[Example],
    configurations: Sequence[tuple[str, Sequence[int], Callable[[], Drafter | None]]],
    generation: GenerationConfig,
    repeats: int = 1,
    seed: int = 0,
    progress: bool = True,
) -> SideBySide:
    """Time each (label, skip set, make_drafter) on every example's first turn with the engine, and say
    where (`timing_hardware`: a share of the CPU below what the cost profile requires is warned about
    and recorded)."""

    def runner(skip: Sequence[int], make_drafter: Callable[[], Drafter | None]) -> Runner:
        def run(example: Example) -> GenerationResult:
            messages = build_messages(domain, example, 0, [])
            return generate_text(target, messages, make_drafter(), generation, skip)[1]
        return run

    before = cpu_share()
    timed = time_runners(examples, [(label, runner(skip, make)) for label, skip, make in configurations],
                         repeats, seed, progress)
    return replace(timed, hardware=timing_hardware(target, (before, cpu_share())))


def timing_hardware(target: LoadedModel, shares: tuple[float, float]) -> dict:
    """Where a timing ran: host, process, device (a GPU's name), torch threads, and the share of the CPU
    the process got just before and after (`cpu_share`; below MIN_CPU_SHARE other work shared the
    cores, so the timing is flagged `busy` and a warning says so)."""
    device = target.model.device
    busy = min(shares) < MIN_CPU_SHARE
    if busy:
        log.warning("timed side by side on a busy machine: this process got %.0f%% / %.0f%% of the CPU it asks for "
                    "before / after (at least %.0f%% expected): the speedups may reflect the load",
                    100 * shares[0], 100 * shares[1], 100 * MIN_CPU_SHARE)
    return {"host": socket.gethostname(), "pid": os.getpid(), "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or None,
            "threads": torch.get_num_threads(), "cpu_share": [round(v, 3) for v in shares], "busy": busy}


def time_runners(
    examples: Sequence[Example], runners: Sequence[tuple[str, Runner]], repeats: int = 1, seed: int = 0,
    progress: bool = True,
) -> SideBySide:
    """Time each (label, runner) on every example, interleaved (see the module docstring)."""
    if len(runners) < 2:
        raise ValueError("side-by-side timing needs at least two configurations")
    tokens = np.zeros((len(examples), len(runners)))
    seconds, steps, accepted, draft_seconds, prefill_seconds, verify_seconds, prefill_tokens = (
        np.zeros_like(tokens) for _ in range(7))
    verified: list[list[int]] = [[] for _ in runners]  # every step's verified length, per configuration
    outputs: list[list[tuple[int, ...]]] = [[() for _ in examples] for _ in runners]
    order = list(range(len(runners)))
    with tqdm(total=len(examples) * repeats * len(order), desc="timing side by side", disable=not progress,
              leave=False) as bar, torch.inference_mode():
        for i, example in enumerate(examples):
            for _ in range(repeats):
                for c in order:
                    result = runners[c][1](example)
                    tokens[i, c] += result.new_tokens
                    seconds[i, c] += result.wall_time_s
                    steps[i, c] += result.target_forwards
                    accepted[i, c] += sum(result.accept_lengths)
                    draft_seconds[i, c] += result.draft_time_s
                    prefill_seconds[i, c] += result.prefill_time_s
                    verify_seconds[i, c] += result.verify_time_s
                    prefill_tokens[i, c] += result.prefill_tokens
                    verified[c] += result.verified_lengths
                    outputs[c][i] = result.new_token_ids
                    bar.update()
                order.reverse()
    rate = tokens.sum(0) / seconds.sum(0)
    draws = np.random.default_rng(seed).integers(0, len(examples), size=(2000, len(examples)))
    rates = tokens[draws].sum(1) / seconds[draws].sum(1)  # [draws, configurations]
    labels = tuple(label for label, _ in runners)
    speedups = {}
    for i, j in itertools.combinations(range(len(labels)), 2):
        low, high = np.percentile(rates[:, j] / rates[:, i], [2.5, 97.5])
        speedups[f"{labels[j]}/{labels[i]}"] = [float(rate[j] / rate[i]), float(low), float(high)]
    total_steps = np.maximum(steps.sum(0), 1)
    latencies = seconds[draws].mean(1) / repeats  # [draws, configurations]
    latency = [[float(point), *map(float, np.percentile(latencies[:, c], [2.5, 97.5]))]
               for c, point in enumerate(seconds.mean(0) / repeats)]
    return SideBySide(
        labels, tuple(float(r) for r in rate), speedups, len(examples),
        accept_lengths=tuple(float(a) for a in accepted.sum(0) / total_steps),
        latency_s=tuple(latency),
        draft_ms_per_step=tuple(float(d) for d in 1000 * draft_seconds.sum(0) / total_steps),
        same_as_first=tuple(sum(o == first for o, first in zip(out, outputs[0])) for out in outputs),
        terms=tuple(_terms(*(a[:, c].sum() for a in (tokens, seconds, prefill_seconds, verify_seconds, draft_seconds,
                                                      prefill_tokens)), len(examples) * repeats, verified[c])
                    for c in range(len(runners))),
        outputs=tuple(tuple(out) for out in outputs),
    )


def _terms(tokens: float, seconds: float, prefill: float, verify: float, draft: float, prefill_tokens: float,
           prefills: int, verified: list[int]) -> dict:
    """One configuration's time by term, in ms per generated token, and the counts that price it."""
    per_token = 1000 / max(tokens, 1)
    return {"ms_per_token": seconds * per_token, "prefill_ms_per_token": prefill * per_token,
            "verify_ms_per_token": verify * per_token, "draft_ms_per_token": draft * per_token,
            "other_ms_per_token": (seconds - prefill - verify - draft) * per_token,
            "tokens": int(tokens), "steps": len(verified), "verified_tokens": sum(verified), "prefills": prefills,
            "prefill_tokens": int(prefill_tokens),
            "chunk_counts": [verified.count(n) for n in range(1, max(verified, default=0) + 1)]}
