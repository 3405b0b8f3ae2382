"""Files earlier versions of specsparse wrote, read in this version's form: the translations of old layouts
live here, one function per format and version (two old forms are handled elsewhere, named below).

A version here is the form a file had until the commit that stopped writing it, named in each
function's docstring. Each function
takes a record as its file holds it (JSON or YAML data) and returns it in the next version's form; a
record already past that version comes back as it is, the same object. A record a function does not
recognise is left alone too, for its reader's own checks to refuse in one line. `current_<format>`
applies a format's functions in order, and is what the format's reader calls:

    results store rows: `current_store_measurement`, `current_store_meta` (specsparse/study/store.py)
    summary.json, and a W&B run's summary: `current_summary` (specsparse/reporting/report.py, specsparse/jobs/sweep.py)
    reproduce.json: `current_reproduce` (specsparse/reporting/report.py)
    config maps: `current_config_map` (specsparse/config_map.py)

Read elsewhere: a cost profile of an older schema is refused in one line, never read
(specsparse/measuring/profile.py; a stored one is measured again), and a config map written before
maps recorded their drafter's options (before 89b2715) names its drafter only, which the serving
controller builds with its default options (specsparse/serving/controller.py).

A new layout that a reader must still read adds `<format>_from_v<n>` here, in its `current_<format>`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from specsparse.util import is_number

Record = dict[str, Any]

# Modeled figures, named so since be0bca0: their earlier names.
_MODELED = {"cost": "modeled_cost", "tokens_per_s": "modeled_tokens_per_s", "verify_cost": "modeled_verify_cost"}


def _renamed(record: Record, names: Mapping[str, str]) -> Record:
    """`record` with keys renamed by `names` in place of order; the same object when none is there."""
    if not isinstance(record, Mapping) or not names.keys() & record.keys():
        return record
    return {names.get(key, key): value for key, value in record.items()}


# -- results store rows (specsparse/study/store.py) ---------------------------------------------------------------
def store_measurement_from_v1(measurement: Record) -> Record:
    """A store row's measurement as stored before be0bca0 (2026-12-02), which named the cost profile's
    figures `cost`, `tokens_per_s` and `verify_cost`: modeled_cost, modeled_tokens_per_s and
    modeled_verify_cost. (Such rows are never served again, their code_version differs; reports read them.)"""
    return _renamed(measurement, _MODELED)


def _component_from_v1(component: Any) -> Any:
    """A component record (`asdict(Component)`) as written before 93eff85 (2026-12-03, announced in
    89b2715), which called the class dotpath `target`: `class_path`."""
    if isinstance(component, Mapping) and "class_path" not in component:
        return _renamed(component, {"target": "class_path"})
    return component


def store_meta_from_v1(meta: Record) -> Record:
    """A store row's description (`study.keys.describe`) as stored before 93eff85 (2026-12-03): its
    drafter's class dotpath under `target`, now `class_path`."""
    drafter = _component_from_v1(meta.get("drafter"))
    return meta if drafter is meta.get("drafter") else {**meta, "drafter": drafter}


def current_store_measurement(measurement: Record) -> Record:
    """A store row's measurement column, of any version, in this version's form."""
    return store_measurement_from_v1(measurement)


def current_store_meta(meta: Record) -> Record:
    """A store row's meta column, of any version, in this version's form."""
    return store_meta_from_v1(meta)


# -- summary.json (specsparse/jobs/result.py writes it) -----------------------------------------------------------
_SUMMARY_V1_KEYS = {
    "speedup_test": "measured_speedup_test", "speedup_test_interval": "measured_speedup_test_interval",
    "speedup_test_modeled": "modeled_speedup_test", "speedup_test_vs_plain": "measured_speedup_test_vs_plain",
    "speedup_dense_vs_plain": "measured_speedup_dense_vs_plain",
    "plain_tokens_per_s_test": "measured_plain_tokens_per_s_test", "timing_test": "measured_timing_test",
}


def summary_from_v1(summary: Record) -> Record:
    """A job's summary as written before be0bca0 (2026-12-02): measured and modeled figures named so
    (speedup_test -> measured_speedup_test, its measurements' cost -> modeled_cost, ...), metrics on 0-100
    (it held 0-1) and the metric named (`metric`, which it lacked), and the held-out verdict judged by
    the speedup's interval ("dense selected" is "dense kept"; "held" with an interval reaching 1 is
    "inconclusive")."""
    if "metric" in summary or "domain" not in summary:  # a later version's, or not a job's summary
        return summary
    from specsparse.data import DOMAINS  # noqa: PLC0415 - only for summaries this old
    from specsparse.metrics import SCALE, metric_description  # noqa: PLC0415

    def measurement(m: Any) -> Any:  # its modeled figures named so, its metric on 0-100
        if not m:
            return m
        m = _renamed(m, _MODELED)
        return {**m, "metric": None if m.get("metric") is None else SCALE * m["metric"]}

    s = _renamed(dict(summary), _SUMMARY_V1_KEYS)
    domain = DOMAINS.get(s.get("domain"))
    s["metric"] = metric_description(domain.metric) if domain is not None else None
    intervals = dict(s.get("intervals") or {})
    for split in ("calibration", "test"):
        if s.get(split):
            s[split] = {which: measurement(m) for which, m in s[split].items()}
        if intervals.get(split):
            intervals[split] = {key: [SCALE * v for v in values] if key in ("metric_dense", "metric_selected") and values
                                else values for key, values in intervals[split].items()}
    if s.get("intervals"):
        s["intervals"] = intervals
    held = dict(s.get("held_out") or {})
    interval = s.get("measured_speedup_test_interval")
    if held.get("verdict") == "dense selected":
        held["verdict"] = "dense kept"
    elif held.get("verdict") == "held" and interval and interval[0] <= 1:
        held["verdict"] = "inconclusive"
    s["held_out"] = held
    return s


def summary_from_v2(summary: Record) -> Record:
    """A job's summary as written before c583611 (2026-12-03): the vocabulary comparison's rows
    (`vocab_comparison.rows`) without `measured_speedup_vs_pruned`, which such jobs did not time: None,
    as this version writes it for every row but the head trained at k."""
    comparison = summary.get("vocab_comparison")
    rows = comparison.get("rows") if isinstance(comparison, Mapping) else None
    if not isinstance(rows, list) or all(not isinstance(r, Mapping) or "measured_speedup_vs_pruned" in r for r in rows):
        return summary
    rows = [{**r, "measured_speedup_vs_pruned": None} if isinstance(r, Mapping) else r for r in rows]
    return {**summary, "vocab_comparison": {**comparison, "rows": rows}}


def current_summary(summary: Record) -> Record:
    """A summary.json (or a W&B run's summary, its intervals as lists), of any version, in this version's form."""
    return summary_from_v2(summary_from_v1(summary))


# -- reproduce.json (specsparse/jobs/reproduce.py writes it) ------------------------------------------------------
def reproduce_from_v1(record: Record) -> Record:
    """A job's reproduce.json as written before 93eff85 (2026-12-03): the drafter (`evaluation_spec.drafter`)
    and the search (`search_spec`) with their class dotpaths under `target`, now `class_path`."""
    spec, upgraded = record.get("evaluation_spec"), record
    if isinstance(spec, Mapping) and (drafter := _component_from_v1(spec.get("drafter"))) is not spec.get("drafter"):
        upgraded = {**upgraded, "evaluation_spec": {**spec, "drafter": drafter}}
    if (search := _component_from_v1(record.get("search_spec"))) is not record.get("search_spec"):
        upgraded = {**upgraded, "search_spec": search}
    return upgraded


def reproduce_from_v2(record: Record) -> Record:
    """A job's reproduce.json as written before 28426c3 (2026-12-05): its domain (`evaluation_spec.domain`)
    recorded where the examples come from and how they split (name, source, path, options, limit,
    calibration_fraction, split_seed, exclude_ids) but not its metric, answer format and chat
    templates, which the domain's packaged definition gives (a domain that is not packaged is left as it
    is: `Domain.from_record` gives it Domain's defaults, as it did then)."""
    spec = record.get("evaluation_spec")
    domain = spec.get("domain") if isinstance(spec, Mapping) else None
    if not isinstance(domain, Mapping) or "metric" in domain:
        return record
    from specsparse.data import DOMAINS  # noqa: PLC0415 - only for records this old

    packaged = DOMAINS.get(domain.get("name"))
    if packaged is None:
        return record
    full = {**asdict(packaged), "exclude_ids": list(packaged.exclude_ids), **domain}
    return {**record, "evaluation_spec": {**spec, "domain": full}}


def current_reproduce(record: Record) -> Record:
    """A reproduce.json, of any version, in this version's form."""
    return reproduce_from_v2(reproduce_from_v1(record))


# -- config maps (specsparse/config_map.py writes and reads them) -------------------------------------------------
def _each_domain(data: Any, upgrade: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> Any:
    """`data` with `upgrade` applied to each domain entry that is a mapping; the same object when none changed."""
    domains = data.get("domains") if isinstance(data, Mapping) else None
    if not isinstance(domains, Mapping):
        return data
    upgraded = {name: upgrade(entry) if isinstance(entry, Mapping) else entry for name, entry in domains.items()}
    if all(upgraded[name] is entry for name, entry in domains.items()):
        return data
    return {**data, "domains": upgraded}


def _points(entry: Mapping[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """`entry` with `change` applied to itself, its dense point and each of its alternatives."""
    out = dict(change(entry))
    if "dense" in out:
        out["dense"] = change(out["dense"])
    if isinstance(out.get("alternatives"), list):
        out["alternatives"] = [change(a) for a in out["alternatives"]]
    return out


def config_map_from_v1(data: Any) -> Any:
    """A config map as written before be0bca0 (2026-12-02): each domain's and each operating point's
    modeled seconds per token named `cost`, now `modeled_cost`."""
    def renamed(v: Any) -> Any:
        return _renamed(v, {"cost": "modeled_cost"}) if isinstance(v, Mapping) and "modeled_cost" not in v else v

    def upgrade(entry: Mapping[str, Any]) -> Mapping[str, Any]:
        upgraded = _points(entry, renamed)
        return entry if upgraded == entry else upgraded
    return _each_domain(data, upgrade)


def config_map_from_v2(data: Any) -> Any:
    """A config map as written before 33fff04 (2026-12-04), which did not name its domains' metric
    (`metric_name`) and held their metrics on 0-1: the metrics (the pick's, dense's and the alternatives')
    on 0-100, `metric_name` null. A map written by hand without metric_name reads so too."""
    def scaled(v: Any) -> Any:
        if isinstance(v, Mapping) and is_number(v.get("metric")):
            return {**v, "metric": 100.0 * v["metric"]}
        return v

    def upgrade(entry: Mapping[str, Any]) -> Mapping[str, Any]:
        return entry if "metric_name" in entry else {**_points(entry, scaled), "metric_name": None}
    return _each_domain(data, upgrade)


def current_config_map(data: Any) -> Any:
    """A config map file's data, of any version, in this version's form (then checked by its reader)."""
    return config_map_from_v2(config_map_from_v1(data))
