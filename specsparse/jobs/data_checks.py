"""The data settings of a job, checked before any model loads: the `domain` group (its examples load
and split here, so a bad file or an empty split fails now) and corpus options (files that exist,
keywords, built-in sets, Hub ids), and the fingerprint that identifies a job's data."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from specsparse.data import BUILTIN_SETS, DOMAINS, SOURCES, Domain
from specsparse.data.corpus import builtin_sets
from specsparse.jobs.checks import ConfigError, absolute, seed_option
from specsparse.util import first_line

HUB_SOURCES = ("hf", "conll")  # domain.path is a dataset id or builder, loaded through `datasets`
LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")


def _local_builder(path: str | None) -> bool:
    """Whether a Hub source's path names a packaged builder over local files (checked and fingerprinted
    now, as a file source is) rather than a dataset id that may need the network."""
    return path in LOCAL_BUILDERS


def domain_spec(cfg: Mapping[str, Any], cwd: Path, need_test: bool) -> tuple[Domain, dict[str, Any]]:
    """The `domain` group as a Domain, and the fingerprint of its splits (`data_fingerprint`; none for a
    Hub set, which may need the network to load)."""
    name = cfg.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"domain.name={name!r}: give a domain name, e.g. domain={next(iter(DOMAINS))}")
    settings = {f.name for f in fields(Domain)}
    if unknown := sorted(set(cfg) - settings):
        raise ConfigError(f"domain.{unknown[0]} is not a domain setting: use {', '.join(sorted(settings))}")
    source = cfg.get("source", "builtin")
    if source not in SOURCES:
        raise ConfigError(f"domain.source={source!r} is unknown: use one of {', '.join(SOURCES)}")
    if source == "builtin" and name not in BUILTIN_SETS:
        raise ConfigError(f"domain.name={name!r} has no built-in set: the built-in sets are {', '.join(BUILTIN_SETS)} "
                          f"(a domain of your own: conf/domain/{name}.yaml with domain.source=jsonl or hf)")
    path = cfg.get("path")
    if path is not None and source not in HUB_SOURCES:
        path = str(absolute(path, cwd))
        if not Path(path).exists():
            raise ConfigError(f"domain.path: {path} does not exist (domain.source={source})")
    limit = cfg.get("limit")
    if limit is not None and (not isinstance(limit, int) or limit < 2):
        raise ConfigError(f"domain.limit must be an integer >= 2 or null, got {limit!r}")
    fraction = cfg.get("calibration_fraction", 0.2)
    if not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise ConfigError(f"domain.calibration_fraction must be in (0, 1), got {fraction!r}")
    try:
        spec = Domain(**{**cfg, "path": path, "options": _options(cfg.get("options"), source, path, cwd),
                         "calibration_fraction": float(fraction), "split_seed": seed_option(cfg, "split_seed", "domain.split_seed"),
                         "exclude_ids": _exclude_ids(cfg.get("exclude_ids"))})
        spec.check_code_execution()
    except ValueError as err:
        raise ConfigError(f"domain {name}: {first_line(err)}") from None
    if source in HUB_SOURCES and not _local_builder(spec.path):  # the job loads it (and reports problems)
        return spec, {}
    try:
        calibration, test = spec.load("calibration"), spec.load("test")
    except (OSError, ImportError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"domain {name} ({source}): {first_line(err)}") from None
    if not calibration or (need_test and not test):
        raise ConfigError(
            f"domain {name} ({source}) gives {len(calibration)} calibration and {len(test)} test examples: "
            "raise domain.limit or change domain.calibration_fraction"
        )
    if spec.exclude_ids:
        known = {ex.id for ex in spec.examples()}
        unknown = sorted(set(spec.exclude_ids) - known)
        if unknown:
            raise ConfigError(f"domain.exclude_ids names {len(unknown)} id(s) the {source} set does not have, "
                              f"e.g. {unknown[0]!r}: check the ids (or domain.limit)")
    return spec, data_fingerprint(calibration, test)


def _options(value: Any, source: str, path: str | None, cwd: Path) -> dict[str, Any]:
    """The loader options, a local builder's `data_files` as absolute paths that exist."""
    options = dict(value or {})
    files = options.get("data_files")
    if source in HUB_SOURCES and _local_builder(path) and files:
        options["data_files"] = [str(absolute(f, cwd)) for f in ([files] if isinstance(files, str) else files)]
        if missing := [f for f in options["data_files"] if not Path(f).exists()]:
            raise ConfigError(f"domain.options.data_files: {missing[0]} does not exist (domain.path={path})")
    return options


def _exclude_ids(value: Any) -> tuple[str, ...]:
    """A list of example ids (one id alone is a list of one, not of its characters)."""
    ids = [value] if isinstance(value, str) else list(value or ())
    if not all(isinstance(i, str) and i for i in ids):
        raise ConfigError(f"domain.exclude_ids={value!r} must be a list of example ids, e.g. [qa-00000]")
    return tuple(ids)


def data_fingerprint(calibration: Sequence[Any], test: Sequence[Any]) -> dict[str, Any]:
    """Hashes of the example ids (and contents) of both splits: what identifies the data of a job."""
    def ids_hash(examples: Sequence[Any]) -> str:
        return hashlib.sha256("\n".join(ex.id for ex in examples).encode()).hexdigest()

    content = hashlib.sha256()
    for ex in [*calibration, *test]:
        content.update(json.dumps([ex.id, list(ex.turns), list(ex.references)], ensure_ascii=False).encode())
    return {
        "calibration_ids_sha256": ids_hash(calibration),
        "test_ids_sha256": ids_hash(test),
        "content_sha256": content.hexdigest(),
        "n_calibration": len(calibration),
        "n_test": len(test),
    }


def corpus_entries(value: Any, cwd: Path, key: str, keywords: Sequence[str], allow_empty: bool = False) -> tuple[str, ...]:
    """A corpus option: `keywords`, builtin:<domain> and "hf:" ids stay, files and folders become
    absolute paths that exist."""
    if isinstance(value, str):
        value = [value]
    named = ", ".join([*keywords, "builtin:<domain>"])
    if not isinstance(value, (list, tuple)) or not (value or allow_empty) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{key}={value!r}: give a list of {named}, files or hf:<dataset>")
    entries = []
    for entry in value:
        if entry in keywords or builtin_sets(entry) is not None or entry.startswith("hf:"):
            entries.append(entry)
            continue
        path = absolute(entry, cwd)
        if not path.exists():
            raise ConfigError(f"{key}: {entry!r} is neither one of {named} nor an existing file or folder ({path})")
        entries.append(str(path))
    return tuple(entries)
