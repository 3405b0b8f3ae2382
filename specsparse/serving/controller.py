"""The TSS runtime controller: one fully loaded target serves every domain's sparse path.

A request is mapped to a domain (explicit tag, else the router), and that domain's skip set (and
trimmed draft vocabulary, when known) is applied for the whole request. Skip sets are applied per
forward on the same weights (see `skipping.py`), so switching domains needs no reload and no copy.
The drafter is the one the config map records, class and options as the search measured with it
(`from_files`).

Routing rules, in order:
1. A `domain` tag naming a domain of the config map wins (routed_by="tag").
2. A tag naming a domain the router knows but the map has no entry for runs the dense target
   (routed_by="fallback"); a tag nobody knows raises `UnknownDomainError` (the server answers 400):
   a typo should not silently cost speed.
3. Without a tag the router classifies; a prediction below `min_confidence`, or for a domain the
   map has no entry for, runs the dense target (routed_by="fallback", `reason` says why).

Only picks that held on the held-out split are served: a domain whose recorded verdict is
inconclusive (or not evaluated) runs the dense target unless `serve_inconclusive`, one that did not
hold always does (`specsparse.config_map.serving_plan`; `serving` holds its line per domain).

Greedy decoding stays lossless: the reply equals the target's own greedy output under the
applied skip set, exactly as `generate_text` would produce it.

Each request's reply text is followed step by step with `token_stream.py` (streamed deltas, stop strings).

Trimmed vocabularies: a config map written by a vocabulary search carries the head's token ids
(`draft_vocab_ids`); `vocab_ids={domain: [ids]}` (or a JSON file of that shape for `from_files`)
overrides them. A domain with a size but no ids drafts over the full vocabulary (a warning is
logged; output is unchanged, only draft cost differs).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specsparse.config_map import ConfigMap, ConfigMapError, load_config_map, serving_plan
from specsparse.decoding.generation import encode_messages, generate_text
from specsparse.decoding.models import LoadedModel, load_model
from specsparse.decoding.skipping import SkipSetError, validate_skip_layers
from specsparse.drafters import DRAFTERS, Drafter
from specsparse.serving.router import (
    DomainRouter,
    RouterError,
    builtin_prompts,
    load_router,
    make_router,
    map_routing_prompts,
    prompts_from_jsonl,
    routing_text,
)
from specsparse.serving.token_stream import StopWatch, TextStream
from specsparse.types import Component, GenerationConfig, GenerationResult

log = logging.getLogger(__name__)

Prompt = str | Sequence[Mapping[str, Any]]
DrafterFactory = Callable[[LoadedModel, list[int] | None], Drafter | None]

DEFAULT_MIN_CONFIDENCE = 0.6  # below it the dense target serves (routing accuracy: BENCHMARKS.md)
DEFAULT_DRAFTER = "samd"  # for a config map that records no drafter


class ControllerError(ValueError):
    """The config map, vocabulary ids or router do not fit the loaded model; one-line message."""


class UnknownDomainError(ValueError):
    """A request tagged a domain that neither the config map nor the router knows."""


class PromptTooLongError(ValueError):
    """Prompt plus requested new tokens exceed the model's context or the configured prompt limit."""


@dataclass(frozen=True)
class Route:
    """Where a request goes. domain: the config-map domain applied, or None for the dense target."""

    domain: str | None
    routed_by: str  # "tag", "classifier" or "fallback"
    confidence: float
    reason: str | None = None
    predicted: str | None = None  # the router's or the tag's domain, also when it fell back


@dataclass(frozen=True)
class ControllerResult:
    """One served request: the reply, how it was routed, and its speed."""

    text: str
    domain: str | None
    routed_by: str
    confidence: float
    reason: str | None
    skip_layers: tuple[int, ...]
    vocab_size: int
    accept_length: float
    prompt_tokens: int
    new_tokens: int
    finish_reason: str  # "stop" (end of sequence) or "length" (max_new_tokens reached)
    tokens_per_s: float  # new tokens / engine wall time
    routing_ms: float  # router (or tag) decision
    total_ms: float  # the whole call, including any wait for the model lock
    generation: GenerationResult = field(compare=False, repr=False)


def drafter_factory(drafter: Component | str, **options: Any) -> DrafterFactory:
    """A factory building `drafter` for a target and its trimmed vocabulary ids: a drafter config (as
    a config map records it) or a short name ("pld", "samd", "recycling", "self_skip", "draft_model",
    "eagle", or "none" for plain decoding), with `options` over the config's own."""
    if drafter == "none":
        return lambda target, vocab_ids: None
    if isinstance(drafter, str):
        if drafter not in DRAFTERS:
            raise ControllerError(f"unknown drafter {drafter!r}: use one of {', '.join([*DRAFTERS, 'none'])}")
        drafter = Component(DRAFTERS[drafter])
    drafter = replace(drafter, options={**drafter.options, **options})
    return lambda target, vocab_ids: drafter.build(target=target, vocab_ids=vocab_ids)



class Controller:
    """Serves requests on one loaded target, applying each domain's skip set. Thread-safe: requests
    run one at a time under a lock (callers queue on it)."""

    def __init__(
        self,
        target: LoadedModel,
        config_map: ConfigMap,
        drafter_factory: DrafterFactory,
        router: DomainRouter | None = None,
        min_confidence: float = DEFAULT_MIN_CONFIDENCE,
        vocab_ids: Mapping[str, Sequence[int]] | None = None,
        max_prompt_tokens: int | None = None,
        force_map: bool = False,
        serve_inconclusive: bool = False,
        domain_drafters: Mapping[str, DrafterFactory] | None = None,
    ) -> None:
        """domain_drafters: factories of the domains a merged map serves with a drafter of their own
        (`DomainConfig.drafter`); every other domain, and the dense fallback, use `drafter_factory`."""
        self.target = target
        self.config_map, self.serving = serving_plan(config_map, serve_inconclusive)  # what each domain runs, and why
        config_map = self.config_map
        for line in self.serving:
            log.info("serving %s", line)
        self.router = router
        self.min_confidence = float(min_confidence)
        self.max_context = int(getattr(target.model.config, "max_position_embeddings", 0) or 0) or None
        self.max_prompt_tokens = max_prompt_tokens
        self.vocab_ids = _validate(target, config_map, vocab_ids or {}, force_map)
        self.drafter_factory = drafter_factory
        self._lock = threading.Lock()
        # One drafter per domain, and one for dense fallbacks (None), built now so that a drafter that
        # cannot take a trimmed vocabulary fails at start, not on the first request. Each serves every
        # request of its domain: what it learns (a Token Recycling table) persists across them.
        self._drafters: dict[str | None, Drafter | None] = {}
        for domain in (None, *config_map.domains):
            ids = self.vocab_ids.get(domain) if domain else None
            try:
                build = (domain_drafters or {}).get(domain, drafter_factory) if domain else drafter_factory
                self._drafters[domain] = build(target, None if ids is None else list(ids))
            except (TypeError, ValueError) as err:  # TypeError: an option the drafter does not take
                raise ControllerError(f"drafter cannot be built: {err}") from err

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(self.config_map.domains)

    @property
    def known_domains(self) -> tuple[str, ...]:
        """Config-map domains plus any other domain the router can predict."""
        extra = [d for d in (self.router.domains if self.router else ()) if d not in self.config_map.domains]
        return (*self.domains, *extra)

    @classmethod
    def from_files(
        cls,
        model: str = "smollm2-135m",
        config_map: str | os.PathLike = "config_map.yaml",
        drafter: str | None = None,
        dtype: str = "float32",
        forward_path: str = "auto",
        router_examples: str | os.PathLike | None = "map",
        router_kind: str = "tfidf",
        min_confidence: float = DEFAULT_MIN_CONFIDENCE,
        vocab_ids: str | os.PathLike | None = None,
        max_prompt_tokens: int | None = None,
        drafter_options: Mapping[str, Any] | None = None,
        force_map: bool = False,
        serve_inconclusive: bool = False,
    ) -> Controller:
        """Load the target and the config map, and build the drafter and the router.

        drafter: None serves the drafters the config map records, as the searches measured them (a map of
            an earlier version names it only: its default options, said once); a short name ("pld", ...,
            "none") serves that drafter everywhere instead.
        drafter_options: options over the drafter's (e.g. another checkpoint `path`).
        router_examples: "map" (fit on the calibration prompts the config map records for its domains,
            the search's own data, plus the built-in calibration prompts of the built-in domains it
            lacks, so their requests are recognised and served dense), "builtin" (fit on the
            calibration split of the built-in domains), a saved
            router (.json, see `DomainRouter.save`), a JSONL file of {"domain", "prompt" | "turns"}
            prompts to fit on, or None (tags only; untagged -> dense).
        vocab_ids: JSON file {domain: [token id, ...]} with the trimmed draft vocabularies.
        force_map: apply a map that records another model's identity (otherwise an error).
        serve_inconclusive: also serve picks whose held-out verdict is inconclusive (see the module docstring).
        """
        cmap = load_config_map(config_map)
        if drafter is None and isinstance(cmap.drafter, str):
            log.warning("%s names its drafter only (%r, written by an earlier version): serving it with its "
                        "default options, which may not be those the search measured with", config_map, cmap.drafter)
        factory = drafter_factory(drafter or cmap.drafter or DEFAULT_DRAFTER, **(drafter_options or {}))
        own = {name: drafter_factory(d.drafter, **(drafter_options or {})) for name, d in cmap.domains.items()
               if d.drafter is not None and drafter is None}
        ids = _read_vocab_ids(vocab_ids) if vocab_ids is not None else None
        target = load_model(model, dtype=dtype, forward_path=forward_path)
        controller = cls(target, cmap, factory, None, min_confidence, ids, max_prompt_tokens, force_map,
                         serve_inconclusive, own)  # checks the map
        controller.router = _build_router(router_examples, router_kind, target, cmap)
        return controller

    # -- routing ----------------------------------------------------------------------------------
    def route(self, prompt: Prompt, domain: str | None = None) -> Route:
        """Decide which domain's configuration serves `prompt` (see the module docstring)."""
        if domain is not None:
            if domain in self.config_map.domains:
                return Route(domain, "tag", 1.0, predicted=domain)
            if domain in self.known_domains:
                return Route(None, "fallback", 1.0, f"tagged domain {domain!r} has no entry in the config map", domain)
            raise UnknownDomainError(f"unknown domain {domain!r}: known domains are {', '.join(self.known_domains)}")
        if self.router is None:
            return Route(None, "fallback", 0.0, "no domain tag and no router")
        predicted, confidence = self.router.predict(routing_text(prompt))
        if confidence < self.min_confidence:
            reason = f"router confidence {confidence:.2f} for {predicted!r} is below {self.min_confidence:.2f}"
            return Route(None, "fallback", confidence, reason, predicted)
        if predicted not in self.config_map.domains:
            reason = f"routed domain {predicted!r} has no entry in the config map"
            return Route(None, "fallback", confidence, reason, predicted)
        return Route(predicted, "classifier", confidence, predicted=predicted)

    def encode(self, prompt: Prompt, max_new_tokens: int = 0) -> list[int]:
        """Prompt token ids (chat template applied); raises PromptTooLongError when the prompt exceeds
        `max_prompt_tokens` or prompt + `max_new_tokens` exceeds the model's context."""
        ids = encode_messages(self.target.tokenizer, prompt)
        if self.max_prompt_tokens is not None and len(ids) > self.max_prompt_tokens:
            raise PromptTooLongError(f"prompt has {len(ids)} tokens; the limit is {self.max_prompt_tokens}")
        if self.max_context is not None and len(ids) + max_new_tokens > self.max_context:
            raise PromptTooLongError(
                f"prompt ({len(ids)} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the model's "
                f"context of {self.max_context} tokens"
            )
        return ids

    # -- generation -------------------------------------------------------------------------------
    def generate(
        self,
        prompt: Prompt,
        domain: str | None = None,
        max_new_tokens: int = GenerationConfig.max_new_tokens,
        num_draft_tokens: int = GenerationConfig.num_draft_tokens,
        draft_length: str = GenerationConfig.draft_length,
        temperature: float = GenerationConfig.temperature,
        seed: int = GenerationConfig.seed,
        on_text: Callable[[str], None] | None = None,
        stop: Sequence[str] = (),
    ) -> ControllerResult:
        """Route `prompt` (a string = one user message, or chat messages) and generate the reply.

        on_text: called with each new piece of reply text as verification steps commit tokens
        (streaming); the pieces concatenate to the final text.
        stop: generation ends after the verification step whose text first contains one of these strings
        (the text is returned whole, finish_reason "stop"; cutting at the string is the caller's).
        """
        start = time.perf_counter()
        config = GenerationConfig(max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens,
                                  temperature=temperature, seed=seed, draft_length=draft_length)
        prompt_ids = self.encode(prompt, max_new_tokens)
        if domain is not None:
            self.route(prompt, domain)  # an unknown tag fails now, not after waiting for the lock
        with self._lock:  # the hidden-state router runs the target too, so routing is inside the lock
            tick = time.perf_counter()
            route = self.route(prompt, domain)
            routing_ms = 1000 * (time.perf_counter() - tick)
            skip = self.config_map.domains[route.domain].skip_layers if route.domain else ()
            ids = self.vocab_ids.get(route.domain) if route.domain else None
            stream = TextStream(self.target.tokenizer, on_text) if on_text is not None else None
            watch = StopWatch(self.target.tokenizer, stop, stream)
            text, result = generate_text(self.target, prompt, self._drafters[route.domain], config, skip,
                                         on_step=watch.step if stream or stop else None)
        if stream is not None:
            stream.finish(text)
        ended = watch.stopped or bool(result.new_token_ids) and result.new_token_ids[-1] in self.target.eos_token_ids
        total_ms = 1000 * (time.perf_counter() - start)
        log.info("domain=%s routed_by=%s skip=%s accept=%.2f tokens=%d %.0f ms", route.domain, route.routed_by,
                 list(skip), result.mean_accept_length, result.new_tokens, total_ms)
        return ControllerResult(
            text=text,
            domain=route.domain,
            routed_by=route.routed_by,
            confidence=route.confidence,
            reason=route.reason,
            skip_layers=tuple(skip),
            vocab_size=len(ids) if ids is not None else self.target.model.config.vocab_size,
            accept_length=result.mean_accept_length,
            prompt_tokens=len(prompt_ids),
            new_tokens=result.new_tokens,
            finish_reason="stop" if ended else "length",
            tokens_per_s=result.tokens_per_s,
            routing_ms=routing_ms,
            total_ms=total_ms,
            generation=result,
        )


def _validate(
    target: LoadedModel, cmap: ConfigMap, vocab_ids: Mapping[str, Sequence[int]], force_map: bool = False
) -> dict[str, tuple[int, ...]]:
    """Check the map against the model; return the usable vocabulary ids per domain (sorted)."""
    name = target.identity.get("name", "target")
    mismatch = cmap.identity_mismatch(target.identity)
    if mismatch and not force_map:
        raise ControllerError(f"config map was made for another model ({mismatch}): use the map made for this "
                              "model, or --force-map to apply it anyway")
    if cmap.num_layers != target.num_layers:
        raise ControllerError(
            f"config map is for a {cmap.num_layers}-layer model ({cmap.model}) but {name!r} has "
            f"{target.num_layers} layers: use the config map made for this model"
        )
    for domain, config in cmap.domains.items():
        try:
            validate_skip_layers(list(config.skip_layers), target.num_layers)
        except SkipSetError as err:
            raise ControllerError(f"config map domain {domain!r}: {err}") from None
    vocab_size = target.model.config.vocab_size
    unknown = sorted(set(vocab_ids) - set(cmap.domains))
    if unknown:
        raise ControllerError(f"vocabulary ids given for domains {unknown} that the config map does not have")
    usable: dict[str, tuple[int, ...]] = {}
    for domain, config in cmap.domains.items():
        ids = vocab_ids.get(domain, getattr(config, "draft_vocab_ids", None))
        if ids is None:
            if config.draft_vocab_size is not None:
                log.warning("domain %r: the config map gives draft_vocab_size=%d but no token ids; the drafter "
                            "uses the full vocabulary", domain, config.draft_vocab_size)
            continue
        ids = list(ids)
        bad = [i for i in ids if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < vocab_size]
        if bad or not ids or len(set(ids)) != len(ids):
            what = f"ids {bad[:5]} outside [0, {vocab_size})" if bad else "an empty or repeated id list"
            raise ControllerError(f"domain {domain!r}: draft vocabulary has {what}")
        if config.draft_vocab_size is not None and len(ids) != config.draft_vocab_size:
            raise ControllerError(
                f"domain {domain!r}: {len(ids)} vocabulary ids but the config map says draft_vocab_size="
                f"{config.draft_vocab_size}"
            )
        usable[domain] = tuple(sorted(ids))
    return usable


def _read_vocab_ids(path: str | os.PathLike) -> dict[str, list[int]]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ControllerError(f"{path}: no such vocabulary file") from None
    except json.JSONDecodeError as err:
        raise ControllerError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise ControllerError(f"{path}: expected a JSON object {{domain: [token id, ...]}}")
    return data


def _build_router(
    examples: str | os.PathLike | None, kind: str, target: LoadedModel, cmap: ConfigMap
) -> DomainRouter | None:
    if examples is None:
        return None
    try:
        if str(examples) == "map":
            return make_router(kind, target).fit(map_routing_prompts(cmap))
        if str(examples) == "builtin":
            return make_router(kind, target).fit(builtin_prompts("calibration"))
        if str(examples).endswith(".json"):
            return load_router(examples, target)
        return make_router(kind, target).fit(prompts_from_jsonl(examples))
    except RouterError as err:
        raise ControllerError(str(err)) from None


__all__ = [
    "ConfigMapError",
    "Controller",
    "ControllerError",
    "ControllerResult",
    "PromptTooLongError",
    "Route",
    "UnknownDomainError",
    "drafter_factory",
]
