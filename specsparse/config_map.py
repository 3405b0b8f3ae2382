"""The domain config map: what the runtime controller applies per domain.

One file, written as both YAML and JSON with the same content:

    specsparse_version: 0.1.0
    created: 2025-01-01T00:00:00+00:00
    model: SmolLM2-135M-Instruct
    num_layers: 30
    drafter:                            # the drafter as the search measured it; serving builds it
      class_path: specsparse.drafters.pld.PromptLookupDrafter
      options: {max_ngram_size: 3}
    domains:
      qa:
        skip_layers: [3, 17]            # selected skip set
        verdict: held                   # held-out verdict (held / inconclusive / did not hold / dense kept / not evaluated)
        verdict_checks:                 # each check's 95% interval [point, low, high] against its threshold
          speedup: {interval: [1.21, 1.12, 1.30], threshold: 1.0, state: held}
        accept_length: 2.31             # calibrated on the calibration split
        metric_name: F1                 # the domain's metric; metrics on 0-100
        metric: 52.0                    # null for domains without references
        sparsity: 0.0667                # skipped / num_layers
        modeled_cost: 0.0123            # seconds per generated token, from the cost profile
        flops_fraction: 0.933
        draft_vocab_size: null          # or the trimmed drafter vocabulary size
        dense: {skip_layers: [], accept_length: 2.40, metric: 53.0, modeled_cost: 0.0131}
        alternatives: [{skip_layers: [3], accept_length: 2.38, metric: 53.0, modeled_cost: 0.0127}]
        notes: []

Serving routes a domain's pick only when its verdict held (`serving_plan`); maps without verdicts
(written by hand, or before maps recorded them) are served as written. Maps of earlier versions are read
in this version's form (`specsparse.old_formats`: metrics on 0-1 before maps named their metric).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from specsparse import __version__
from specsparse.old_formats import current_config_map
from specsparse.types import Candidate, Component
from specsparse.util import atomic_write_text, first_line, is_int, is_number, strict_json, utc_now

log = logging.getLogger(__name__)

_SUFFIXES = (".yaml", ".yml", ".json")
VERDICTS = ("held", "inconclusive", "did not hold", "dense kept", "not evaluated")  # `JobResult.held_out`


class ConfigMapError(ValueError):
    """A malformed config map file; the message is one line: `<file>: <where>: <what>`."""


@dataclass(frozen=True)
class OperatingPoint:
    """A measured configuration: the dense baseline or a Pareto alternative."""

    skip_layers: tuple[int, ...]
    accept_length: float
    metric: float | None
    modeled_cost: float


@dataclass(frozen=True)
class DomainConfig:
    """The configuration one domain runs with, and the evidence behind it."""

    skip_layers: tuple[int, ...]
    accept_length: float
    metric: float | None
    sparsity: float
    modeled_cost: float
    flops_fraction: float
    draft_vocab_size: int | None
    dense: OperatingPoint
    alternatives: tuple[OperatingPoint, ...] = ()
    notes: tuple[str, ...] = ()
    draft_vocab_ids: tuple[int, ...] | None = None  # the trimmed head's token ids (len == draft_vocab_size)
    # The calibration prompts the search ran on (user turns, as the router reads a request): the
    # runtime router is fitted on them by default, so routing learns from the search's own data.
    routing_prompts: tuple[str, ...] = ()
    metric_name: str | None = None  # the domain's metric (BLEU, ROUGE-L, F1, ...); metrics are on 0-100
    # The pick's held-out verdict (`specsparse.jobs.result.JobResult.held_out`) and its checks
    # ({name: {interval: [point, low, high], threshold, state}}); None: not recorded.
    verdict: str | None = None
    verdict_checks: Mapping[str, Any] = field(default_factory=dict)
    # The drafter this domain was measured with where it is not the map's (a merged map of jobs whose
    # drafters differ, e.g. an EAGLE head trained per domain); None: the map's drafter.
    drafter: Component | None = None

    @property
    def label(self) -> str:
        """The pick as results tables name it: dense, skip[3,17], skip[3,17]|vocab=4096 with a trimmed head."""
        return Candidate(self.skip_layers, self.draft_vocab_size).label


@dataclass(frozen=True)
class ConfigMap:
    """Header fields plus one DomainConfig per domain name."""

    model: str
    num_layers: int
    domains: dict[str, DomainConfig]
    # The drafter the search measured with; a short name (e.g. "samd") in maps written before maps
    # recorded the drafter's options.
    drafter: Component | str | None = None
    created: str = field(default_factory=utc_now)
    specsparse_version: str = __version__
    model_identity: dict[str, Any] | None = None  # the weights' fingerprint (dtype aside) the map was made on

    def identity_mismatch(self, identity: Mapping[str, Any]) -> str | None:
        """Why a model with `identity` is not the one this map was made for, or None. Weight
        fingerprints (file hashes, tiny-model settings) decide when both have them, else the name."""
        if not self.model_identity:
            return None
        mine = {k: v for k, v in self.model_identity.items() if k != "dtype"}
        theirs = {k: v for k, v in identity.items() if k != "dtype"}
        shared = (set(mine) & set(theirs)) - {"name"} or {"name"} & set(mine) & set(theirs)
        differing = sorted(k for k in shared if mine[k] != theirs[k])
        if not differing:
            return None
        return "; ".join(f"{k}: map {mine[k]!r}, model {theirs[k]!r}" for k in differing)


# -- writing ---------------------------------------------------------------------------------------
def _point_dict(p: OperatingPoint) -> dict[str, Any]:
    return {"skip_layers": list(p.skip_layers), "accept_length": p.accept_length, "metric": p.metric,
            "modeled_cost": p.modeled_cost}


def _drafter_dict(drafter: Component | str | None) -> dict[str, Any] | str | None:
    if not isinstance(drafter, Component):
        return drafter
    return {"class_path": drafter.class_path, "options": json.loads(strict_json(drafter.options))}  # plain data


def config_map_to_dict(cm: ConfigMap) -> dict[str, Any]:
    """Plain dict (lists, no tuples) in file order."""
    return {
        "specsparse_version": cm.specsparse_version,
        "created": cm.created,
        "model": cm.model,
        "num_layers": cm.num_layers,
        "drafter": _drafter_dict(cm.drafter),
        "model_identity": cm.model_identity,
        "domains": {
            name: {
                "skip_layers": list(d.skip_layers),
                "verdict": d.verdict,
                "verdict_checks": json.loads(strict_json(d.verdict_checks)),
                "accept_length": d.accept_length,
                "metric_name": d.metric_name,
                "metric": d.metric,
                "sparsity": d.sparsity,
                "modeled_cost": d.modeled_cost,
                "flops_fraction": d.flops_fraction,
                "draft_vocab_size": d.draft_vocab_size,
                "dense": _point_dict(d.dense),
                "alternatives": [_point_dict(a) for a in d.alternatives],
                "notes": list(d.notes),
                "draft_vocab_ids": None if d.draft_vocab_ids is None else list(d.draft_vocab_ids),
                "routing_prompts": list(d.routing_prompts),
                **({} if d.drafter is None else {"drafter": _drafter_dict(d.drafter)}),
            }
            for name, d in cm.domains.items()
        },
    }


def _base(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_suffix("") if path.suffix in _SUFFIXES else path


def write_config_map(path: str | os.PathLike, config_map: ConfigMap) -> tuple[Path, Path]:
    """Write `<base>.yaml` and `<base>.json` atomically, where `path` is the base or either file name.
    Returns (yaml_path, json_path)."""
    base = _base(path)
    data = config_map_to_dict(config_map)
    y = atomic_write_text(base.with_name(base.name + ".yaml"), yaml.safe_dump(data, sort_keys=False))
    j = atomic_write_text(base.with_name(base.name + ".json"), strict_json(data) + "\n")
    return y, j


# -- reading and validation ------------------------------------------------------------------------

class _Checker:
    """Type checks that raise ConfigMapError naming the file and the field path."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def fail(self, where: str, what: str) -> ConfigMapError:
        return ConfigMapError(f"{self.file}: {where}: {what}")

    def mapping(self, v: Any, where: str, required: set[str], optional: set[str]) -> Mapping[str, Any]:
        if not isinstance(v, Mapping):
            raise self.fail(where, f"expected a mapping, got {type(v).__name__}")
        missing = sorted(required - set(v))
        if missing:
            raise self.fail(where, f"missing key {missing[0]!r}")
        unknown = sorted(set(map(str, v)) - required - optional)
        if unknown:
            raise self.fail(where, f"unknown key {unknown[0]!r}")
        return v

    def number(self, v: Any, where: str, nullable: bool = False) -> float | None:
        if v is None and nullable:
            return None
        if not is_number(v):
            raise self.fail(where, f"expected a number{' or null' if nullable else ''}, got {v!r}")
        return float(v)

    def layers(self, v: Any, where: str, num_layers: int) -> tuple[int, ...]:
        if not isinstance(v, list) or not all(is_int(i) for i in v):
            raise self.fail(where, f"expected a list of layer indices, got {v!r}")
        bad = [i for i in v if not 0 <= i < num_layers]
        if bad:
            raise self.fail(where, f"layer {bad[0]} out of range [0, {num_layers})")
        if len(set(v)) != len(v):
            raise self.fail(where, f"repeated layer in {v}")
        return tuple(sorted(v))

    def point(self, v: Any, where: str, num_layers: int) -> OperatingPoint:
        keys = {"skip_layers", "accept_length", "metric", "modeled_cost"}
        v = self.mapping(v, where, keys, set())
        return OperatingPoint(
            skip_layers=self.layers(v["skip_layers"], f"{where}.skip_layers", num_layers),
            accept_length=self.number(v["accept_length"], f"{where}.accept_length"),  # type: ignore[arg-type]
            metric=self.number(v["metric"], f"{where}.metric", nullable=True),
            modeled_cost=self.number(v["modeled_cost"], f"{where}.modeled_cost"),  # type: ignore[arg-type]
        )

    def domain(self, v: Any, where: str, num_layers: int) -> DomainConfig:
        required = {"skip_layers", "accept_length", "metric", "sparsity", "modeled_cost", "flops_fraction",
                    "draft_vocab_size", "dense"}
        optional = {"alternatives", "notes", "draft_vocab_ids", "routing_prompts", "metric_name", "verdict",
                    "verdict_checks", "drafter"}
        v = self.mapping(v, where, required, optional)
        verdict, checks = v.get("verdict"), v.get("verdict_checks") or {}
        if verdict is not None and verdict not in VERDICTS:
            raise self.fail(f"{where}.verdict", f"expected one of {', '.join(VERDICTS)} or null, got {verdict!r}")
        if not isinstance(checks, Mapping):
            raise self.fail(f"{where}.verdict_checks", f"expected a mapping, got {type(checks).__name__}")
        vocab = v["draft_vocab_size"]
        if vocab is not None and not (is_int(vocab) and vocab >= 1):
            raise self.fail(f"{where}.draft_vocab_size", f"expected a positive integer or null, got {vocab!r}")
        sparsity = self.number(v["sparsity"], f"{where}.sparsity")
        if not 0 <= sparsity <= 1:  # type: ignore[operator]
            raise self.fail(f"{where}.sparsity", f"expected a value in [0, 1], got {sparsity}")
        alternatives = v.get("alternatives", [])
        if not isinstance(alternatives, list):
            raise self.fail(f"{where}.alternatives", f"expected a list, got {type(alternatives).__name__}")
        notes = v.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise self.fail(f"{where}.notes", f"expected a list of strings, got {notes!r}")
        prompts = v.get("routing_prompts", [])
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise self.fail(f"{where}.routing_prompts", "expected a list of strings")
        return DomainConfig(
            skip_layers=self.layers(v["skip_layers"], f"{where}.skip_layers", num_layers),
            accept_length=self.number(v["accept_length"], f"{where}.accept_length"),  # type: ignore[arg-type]
            metric=self.number(v["metric"], f"{where}.metric", nullable=True),
            sparsity=sparsity,  # type: ignore[arg-type]
            modeled_cost=self.number(v["modeled_cost"], f"{where}.modeled_cost"),  # type: ignore[arg-type]
            flops_fraction=self.number(v["flops_fraction"], f"{where}.flops_fraction"),  # type: ignore[arg-type]
            draft_vocab_size=vocab,
            dense=self.point(v["dense"], f"{where}.dense", num_layers),
            alternatives=tuple(self.point(a, f"{where}.alternatives[{i}]", num_layers) for i, a in enumerate(alternatives)),
            notes=tuple(notes),
            draft_vocab_ids=self.vocab_ids(v.get("draft_vocab_ids"), f"{where}.draft_vocab_ids", vocab),
            routing_prompts=tuple(prompts),
            metric_name=v.get("metric_name"),
            verdict=verdict,
            verdict_checks=dict(checks),
            drafter=self.component(v.get("drafter"), f"{where}.drafter"),
        )

    def drafter(self, v: Any) -> Component | str | None:
        """{class_path, options}, or the short name of a map of an earlier version."""
        return v if isinstance(v, str) else self.component(v, "drafter")

    def component(self, v: Any, where: str) -> Component | None:
        """{class_path, options} as a Component; None for null."""
        if v is None:
            return None
        v = self.mapping(v, where, {"class_path"}, {"options"})
        options = v.get("options") or {}
        if not isinstance(v["class_path"], str) or not isinstance(options, Mapping):
            raise self.fail(where, f"expected a class_path string and an options mapping, got {dict(v)!r}")
        return Component(v["class_path"], dict(options))

    def vocab_ids(self, v: Any, where: str, size: int | None) -> tuple[int, ...] | None:
        if v is None:
            return None
        if not isinstance(v, list) or not v or not all(is_int(i) and i >= 0 for i in v) or len(set(v)) != len(v):
            raise self.fail(where, "expected a non-empty list of distinct non-negative token ids or null")
        if size is not None and len(v) != size:
            raise self.fail(where, f"has {len(v)} ids but draft_vocab_size is {size}")
        return tuple(v)

    def config_map(self, v: Any) -> ConfigMap:
        v = self.mapping(v, "top level", {"model", "num_layers", "domains"},
                         {"drafter", "created", "specsparse_version", "model_identity"})
        identity = v.get("model_identity")
        if identity is not None and not isinstance(identity, Mapping):
            raise self.fail("model_identity", f"expected a mapping, got {identity!r}")
        if not isinstance(v["model"], str):
            raise self.fail("model", f"expected a string, got {v['model']!r}")
        num_layers = v["num_layers"]
        if not (is_int(num_layers) and num_layers >= 1):
            raise self.fail("num_layers", f"expected a positive integer, got {num_layers!r}")
        for key in ("created", "specsparse_version"):
            if v.get(key) is not None and not isinstance(v[key], str):
                raise self.fail(key, f"expected a string, got {v[key]!r}")
        domains = v["domains"]
        if not isinstance(domains, Mapping):
            raise self.fail("domains", f"expected a mapping, got {type(domains).__name__}")
        parsed = {}
        for name, d in domains.items():
            if not isinstance(name, str):
                raise self.fail("domains", f"domain names must be strings, got {name!r}")
            parsed[name] = self.domain(d, f"domains.{name}", num_layers)
        return ConfigMap(
            model=v["model"],
            num_layers=num_layers,
            domains=parsed,
            drafter=self.drafter(v.get("drafter")),
            created=v.get("created") or "",
            specsparse_version=v.get("specsparse_version") or "",
            model_identity=None if identity is None else dict(identity),
        )


def _resolve(path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.suffix in _SUFFIXES:
        if not path.is_file():
            raise ConfigMapError(f"{path}: no such file")
        return path
    for suffix in (".yaml", ".yml", ".json"):
        candidate = path.with_name(path.name + suffix)
        if candidate.is_file():
            return candidate
    raise ConfigMapError(f"{path}: no such config map (.yaml, .yml or .json)")


def load_config_map(path: str | os.PathLike) -> ConfigMap:
    """Read and validate a config map (.yaml/.yml/.json, or a base path: YAML preferred); a map of an
    earlier version is read in this version's form (`specsparse.old_formats.current_config_map`).
    Raises ConfigMapError with a one-line message on a malformed file."""
    file = _resolve(path)
    text = file.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ConfigMapError(f"{file}: not valid {'JSON' if file.suffix == '.json' else 'YAML'}: {first_line(e)}") from e
    return _Checker(file).config_map(current_config_map(data))


# -- merging ---------------------------------------------------------------------------------------
def merge_config_maps(maps: Sequence[ConfigMap]) -> ConfigMap:
    """One map over the domains of `maps` (later maps win a domain both have). The maps must be of
    one model. The map records the first full drafter record; a domain measured with another drafter
    (an EAGLE head of its own) keeps it as its `drafter`, which serving builds for that domain."""
    if not maps:
        raise ConfigMapError("no config maps to merge")
    models = {(cm.model, cm.num_layers) for cm in maps}
    mismatch = next((m for cm in maps[1:] if cm.model_identity and (m := maps[0].identity_mismatch(cm.model_identity))), None)
    if len(models) > 1 or mismatch:
        raise ConfigMapError(f"maps of different models cannot be merged: {mismatch or sorted(models)}; "
                             "merge the maps of one model")
    drafter = next((cm.drafter for cm in maps if isinstance(cm.drafter, Component)), maps[0].drafter)  # full records first
    domains: dict[str, DomainConfig] = {}
    for cm in maps:
        own = cm.drafter if isinstance(cm.drafter, Component) and cm.drafter != drafter else None
        domains.update({name: replace(d, drafter=d.drafter or own) for name, d in cm.domains.items()})
    if any(d.drafter is not None for d in domains.values()):
        log.info("merged maps measured with different drafters: %s keep their own",
                 ", ".join(sorted(name for name, d in domains.items() if d.drafter is not None)))
    model, num_layers = next(iter(models))
    return ConfigMap(model=model, num_layers=num_layers, domains=dict(sorted(domains.items())), drafter=drafter,
                     model_identity=maps[0].model_identity)


# -- serving ---------------------------------------------------------------------------------------
def serving_plan(cm: ConfigMap, serve_inconclusive: bool = False) -> tuple[ConfigMap, list[str]]:
    """The map serving applies, and one line per domain saying what it routes and why. A pick is
    served when its held-out verdict held (or the search kept dense); one that did not hold never is;
    any other verdict (inconclusive, not evaluated) routes the dense target (full draft vocabulary)
    unless `serve_inconclusive`. A domain without a recorded verdict is served as written."""
    domains: dict[str, DomainConfig] = {}
    lines = []
    for name, d in cm.domains.items():
        pick = d.label
        dense_already = not d.skip_layers and d.draft_vocab_size is None and d.draft_vocab_ids is None
        if d.verdict is None:
            lines.append(f"domain {name}: {pick} (no held-out verdict recorded: served as written)")
        elif d.verdict in ("held", "dense kept") or dense_already:
            lines.append(f"domain {name}: {pick} (held-out verdict: {d.verdict})")
        elif serve_inconclusive and d.verdict != "did not hold":
            lines.append(f"domain {name}: {pick}, held-out verdict {d.verdict} (served: --serve-inconclusive)")
        else:
            fix = "" if d.verdict == "did not hold" else " (--serve-inconclusive serves it)"
            lines.append(f"domain {name}: dense, not {pick}: its held-out verdict is {d.verdict}{fix}")
            d = replace(d, skip_layers=(), accept_length=d.dense.accept_length, metric=d.dense.metric, sparsity=0.0,
                        modeled_cost=d.dense.modeled_cost, flops_fraction=1.0, draft_vocab_size=None,
                        draft_vocab_ids=None, alternatives=())
        domains[name] = d
    return replace(cm, domains=domains), lines
