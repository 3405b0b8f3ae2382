"""The report's tables, each built as a full numeric frame (written as CSV; `specsparse.reporting.formatting`
lays them out for Markdown and LaTeX).

Table 1 (per model, method = drafter, and domain, TSS): native vs TSS accept length, metric, tokens/s
and the speedup measured side by side on the test split (with its 95% interval) beside the modeled
one, and the share of layers skipped, from the held-out test evaluation of the latest job of the TSS
strategy (`strategy`, default "bfs"). A speedup is never computed from timings of different runs.
Table 2 (per model, method, domain and strategy): selected skip set, accept length A, metric M,
measured tokens/s and speedup on the test split, cost, configurations measured and search wall time.
The vocabulary tables compare trimmed draft heads in and out of domain; the routing table scores the
runtime's router on held-out prompts; `mixed_stream_row` is Table 1's row for the runtime controller.
A metric that does not exist (domains without references) is empty, never 0.

`merged_config_map` joins the per-job domain config maps into the one multi-domain map the runtime
controller reads.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from specsparse.config_map import ConfigMap, ConfigMapError, load_config_map, merge_config_maps
from specsparse.data import Domain
from specsparse.decoding.models import load_model_cached
from specsparse.measuring.intervals import mean_interval
from specsparse.reporting.mixed_stream import round_robin, run_mixed_stream
from specsparse.reporting.records import JobRecord, ReportError, bounded, latest, tss_jobs
from specsparse.serving.controller import Controller, DrafterFactory, drafter_factory
from specsparse.serving.router import make_router, map_routing_prompts
from specsparse.types import Component, GenerationConfig


# Every table is built as a full numeric frame (written as CSV: a 95% interval is two numeric columns
# <name>_low / <name>_high) and shown in Markdown / LaTeX in a slim layout with the intervals in brackets.
# Metrics are on 0-100 (`metric_name` says which); measured_* come from the engine, timed side by side
# within one job, modeled_* from the cost profile.
def _split_numbers(summary: dict[str, Any]) -> tuple[str, dict | None, dict | None]:
    test = summary.get("test") or {}
    if test.get("dense") and test.get("selected"):
        return "test", test["dense"], test["selected"]
    calibration = summary.get("calibration") or {}
    return "calibration", calibration.get("dense"), calibration.get("selected")


def _get(m: dict | None, key: str) -> float | None:
    if not m:
        return None
    value = m.get(key)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _with_bounds(name: str, values: Sequence[float] | None, point: float | None = None) -> dict[str, float | None]:
    """{name: point, name_low: low, name_high: high} from [point, low, high] (or [low, high] and `point`)."""
    if not values:
        return {name: point, f"{name}_low": None, f"{name}_high": None}
    if len(values) == 2:
        return {name: point, f"{name}_low": values[0], f"{name}_high": values[1]}
    return {name: values[0], f"{name}_low": values[1], f"{name}_high": values[2]}


def _interval(summary: dict[str, Any], split: str, key: str) -> list[float] | None:
    return ((summary.get("intervals") or {}).get(split) or {}).get(key)


def _metric_name(summary: dict[str, Any]) -> str | None:
    return (summary.get("metric") or {}).get("name")


def table1(records: Sequence[JobRecord], strategy: str = "bfs") -> pd.DataFrame:
    """Per model, method (drafter) and domain: native vs TSS accept length and metric with 95%
    intervals, the replies' fidelity to dense, plain decoding and the measured speedups (TSS over
    native, and TSS over plain decoding) with intervals, the modeled speedup, the skipped layers and
    the held-out verdict. `slim_table1` is the paper's layout of it."""
    rows = []
    for (model, method, domain), record in tss_jobs(records, strategy, ("model", "drafter", "domain")).items():
        s = record.summary
        split, dense, selected = _split_numbers(s)
        skip = s.get("selected_skip_layers") or []
        n = record.num_layers
        test = split == "test"
        modeled = None
        if _get(dense, "modeled_tokens_per_s") and _get(selected, "modeled_tokens_per_s") is not None:
            modeled = selected["modeled_tokens_per_s"] / dense["modeled_tokens_per_s"]
        versus_plain = s.get("measured_speedup_test_vs_plain") or s.get("measured_speedup_dense_vs_plain")
        rows.append({
            "model": model, "method": method, "domain": domain, "strategy": record.strategy, "split": split,
            **_with_bounds("accept_native", _interval(s, split, "accept_dense"), _get(dense, "accept_length")),
            **_with_bounds("accept_tss", _interval(s, split, "accept_selected"), _get(selected, "accept_length")),
            "metric_name": _metric_name(s),
            **_with_bounds("metric_native", _interval(s, split, "metric_dense"), _get(dense, "metric")),
            **_with_bounds("metric_tss", _interval(s, split, "metric_selected"), _get(selected, "metric")),
            **_with_bounds("fidelity_tss", (s.get("fidelity") or {}).get(split)),
            "measured_plain_tokens_per_s": s.get("measured_plain_tokens_per_s_test") if test else None,
            "measured_tokens_per_s_native": _measured_rate(s, "dense") if test else None,
            "measured_tokens_per_s_tss": _measured_rate(s, "selected", "dense") if test else None,
            **_with_bounds("measured_speedup_vs_plain", versus_plain if test else None),
            **_with_bounds("measured_speedup_native_vs_plain", s.get("measured_speedup_dense_vs_plain") if test else None),
            **_with_bounds("measured_speedup", s.get("measured_speedup_test_interval") if test else None,
                           s.get("measured_speedup_test") if test else None),
            "modeled_speedup": modeled,
            "skipped_layers": json.dumps(skip),
            "skipped_ratio": (len(skip) / n) if n else None,
            "verdict": (s.get("held_out") or {}).get("verdict"),
        })
    return pd.DataFrame(rows, columns=TABLE1_COLUMNS)


# Speed leads, measured over plain decoding (Spec-Bench's and the papers' baseline), then over
# native (dense speculative decoding); modeled figures follow, named so.
TABLE1_COLUMNS = ["model", "method", "domain", "strategy", "split", *bounded("measured_speedup_vs_plain"),
                  *bounded("measured_speedup_native_vs_plain"), *bounded("measured_speedup"), "modeled_speedup",
                  *bounded("accept_native"), *bounded("accept_tss"),
                  "metric_name", *bounded("metric_native"), *bounded("metric_tss"), *bounded("fidelity_tss"),
                  "measured_plain_tokens_per_s", "measured_tokens_per_s_native", "measured_tokens_per_s_tss",
                  "skipped_layers", "skipped_ratio", "verdict"]
TABLE2_COLUMNS = ["model", "method", "domain", "strategy", "split", "selected_skip_layers",
                  *bounded("measured_speedup_vs_plain"), *bounded("measured_speedup"), *bounded("accept"),
                  "metric_name", *bounded("metric"), *bounded("fidelity"), "measured_tokens_per_s",
                  "verdict", "modeled_ms_per_token", "configurations", "new_measurements", "search_wall_time_s"]


def _measured_rate(summary: dict[str, Any], label: str, fallback: str | None = None) -> float | None:
    """Engine tokens/s of `label` in the job's side-by-side timing (`fallback` when the job timed no
    such configuration: a dense pick is timed as "dense")."""
    timing = summary.get("measured_timing_test") or {}
    rates = dict(zip(timing.get("labels", ()), timing.get("tokens_per_s", ())))
    return rates.get(label, rates.get(fallback) if fallback else None)


def table2(records: Sequence[JobRecord]) -> pd.DataFrame:
    """Per domain and strategy: selected skip set, A, M and fidelity with intervals, the measured
    speedup over dense, modeled cost, configurations measured, search time.

    configurations: configurations the search evaluated (new measurements plus store hits);
    new_measurements and search_wall_time_s count only the job's own run.
    measured_tokens_per_s: the pick's engine throughput in its own job's side-by-side timing; rows
    come from different runs, so compare `measured_speedup` (the pick over dense, timed in the same
    run) across rows.
    Random search has two rows, labelled: its best draw (the pick) and the mean over all its draws.
    """
    rows = []
    groups = latest(records, "model", "drafter", "domain", "strategy")
    for (model, method, domain, strategy), record in sorted(groups.items(), key=lambda i: tuple(map(str, i[0]))):
        s = record.summary
        split, _, selected = _split_numbers(s)
        test = split == "test"
        cost = s["search_cost"]
        label = json.dumps(s.get("selected_skip_layers") or [])
        if s.get("selected_vocab_size") is not None:
            label += f" vocab={s['selected_vocab_size']}"
        modeled_cost = _get(selected, "modeled_cost")
        draws = s.get("random_draws")
        rows.append({
            "model": model, "method": method, "domain": domain, "split": split,
            "strategy": strategy if not draws else f"{strategy}: best of {draws['draws']} draws",
            "selected_skip_layers": label,
            **_with_bounds("accept", _interval(s, split, "accept_selected"), _get(selected, "accept_length")),
            "metric_name": _metric_name(s),
            **_with_bounds("metric", _interval(s, split, "metric_selected"), _get(selected, "metric")),
            **_with_bounds("fidelity", (s.get("fidelity") or {}).get(split)),
            "measured_tokens_per_s": _measured_rate(s, "selected", "dense") if test else None,
            **_with_bounds("measured_speedup", s.get("measured_speedup_test_interval") if test else None,
                           s.get("measured_speedup_test") if test else None),
            **_with_bounds("measured_speedup_vs_plain", s.get("measured_speedup_test_vs_plain") if test else None),
            "verdict": (s.get("held_out") or {}).get("verdict"),
            "modeled_ms_per_token": None if modeled_cost is None else 1000 * modeled_cost,
            "configurations": cost["configurations_measured"] + cost.get("cache_hits", 0),
            "new_measurements": cost["configurations_measured"],
            "search_wall_time_s": cost.get("wall_time_s"),
        })
        if draws:
            rows.append(_mean_of_draws_row(rows[-1], draws, split))
    return pd.DataFrame(rows, columns=TABLE2_COLUMNS)


def _mean_of_draws_row(best: dict[str, Any], draws: dict[str, Any], split: str) -> dict[str, Any]:
    """Random search's second Table 2 row: accept length and metric averaged over every draw on `split`,
    the bounds being the lowest and highest draw (a range, not an interval; the row's strategy says so).
    Only the best draw is timed, so the row has no measured speedup."""
    stats = draws.get(split) or {}
    row = {column: None for column in TABLE2_COLUMNS}
    row.update({key: best[key] for key in ("model", "method", "domain", "split", "metric_name", "configurations",
                                           "new_measurements", "search_wall_time_s")})
    row["strategy"] = f"random: mean [min-max] of {draws['draws']} draws"
    row["selected_skip_layers"] = f"{draws['draws']} sets of {len(draws['best_draw'])} layers"
    for name, key in (("accept", "accept_of_draws"), ("metric", "metric_of_draws")):
        values = stats.get(key)
        if values:
            row.update(_with_bounds(name, [values["mean"], values["min"], values["max"]]))
    cost = stats.get("modeled_cost_of_draws")
    row["modeled_ms_per_token"] = None if not cost else 1000 * cost["mean"]
    return row


IN_DOMAIN = {True: "in domain", False: "out of domain", None: "unknown"}  # the corpus holds the domain's texts
VOCAB_COLUMNS = ["model", "method", "domain", "corpus", "in_domain", "k", "coverage", "split",
                 *bounded("measured_speedup_vs_plain"), *bounded("measured_speedup"), "accept_full", "accept_trimmed",
                 "modeled_tokens_per_s_full", "modeled_tokens_per_s_trimmed"]


def table_vocab(records: Sequence[JobRecord]) -> pd.DataFrame:
    """Vocabulary trimming per domain (the vocabulary paper's in- vs out-of-domain comparison): the
    kept ids come from the job's corpus; the job's domain is in domain when the corpus holds its
    texts. Accept length and modeled tokens/s of the full and the trimmed head on the test split;
    measured_speedup_vs_plain: trimmed over plain decoding, measured_speedup: trimmed over full, both
    timed side by side in the job."""
    rows = []
    groups = latest([r for r in records if r.summary.get("vocab_corpus")], "model", "drafter", "domain")
    for (model, method, domain), record in sorted(groups.items(), key=lambda i: tuple(map(str, i[0]))):
        s = record.summary
        split, full, trimmed = _split_numbers(s)
        test = split == "test"
        corpus = s["vocab_corpus"]
        rows.append({
            "model": model, "method": method, "domain": domain,
            "corpus": ", ".join(Path(e).name if "/" in e else e for e in corpus["entries"]),
            "in_domain": IN_DOMAIN[corpus["in_domain"]],
            "k": s.get("selected_vocab_size"), "coverage": (s.get("info") or {}).get("coverage"), "split": split,
            "accept_full": _get(full, "accept_length"), "accept_trimmed": _get(trimmed, "accept_length"),
            "modeled_tokens_per_s_full": _get(full, "modeled_tokens_per_s"),
            "modeled_tokens_per_s_trimmed": _get(trimmed, "modeled_tokens_per_s"),
            **_with_bounds("measured_speedup", s.get("measured_speedup_test_interval") if test else None,
                           s.get("measured_speedup_test") if test else None),
            **_with_bounds("measured_speedup_vs_plain", s.get("measured_speedup_test_vs_plain") if test else None),
        })
    return pd.DataFrame(rows, columns=VOCAB_COLUMNS)


VOCAB_COMPARISON_COLUMNS = [
    "model", "domain", "in_domain", "method", "label", "k", "coverage_corpus", "coverage_generations",
    "modeled_latency_reduction", "accept_length", "draft_ms_per_step", "measured_tokens_per_s",
    *bounded("measured_latency_s"), *bounded("measured_speedup_vs_full"), *bounded("measured_speedup_vs_plain"),
    *bounded("measured_speedup_vs_pruned"), "same_as_plain", "prompts",
    "k_stability_mean", "k_stability_min", "k_stability_max", "k_stability_jaccard"]


def table_vocab_comparison(records: Sequence[JobRecord], where: str) -> pd.DataFrame:
    """The vocabulary paper's comparison (`vocab_comparison`), one row per head and domain: plain
    decoding, the full head, fixed top-k heads, the full head pruned at TPE's k and the head trained
    at k, every row timed side by side on the domain's test prompts; the stability of k over corpus
    subsets on every row of its domain. Only domains the corpus puts `where` (an `IN_DOMAIN` value): the
    report shows in-domain, out-of-domain and unknown ones apart."""
    rows = []
    groups = latest([r for r in records if r.summary.get("vocab_comparison")], "model", "domain")
    for (model, domain), record in sorted(groups.items(), key=lambda i: tuple(map(str, i[0]))):
        s = record.summary
        comparison = s["vocab_comparison"]
        in_domain = (s.get("vocab_corpus") or {}).get("in_domain")
        stability = comparison.get("stability") or {}
        for row in comparison["rows"]:
            rows.append({
                "model": model, "domain": domain,
                "in_domain": IN_DOMAIN[in_domain],
                **{key: row[key] for key in ("method", "label", "k", "coverage_corpus", "coverage_generations",
                                             "modeled_latency_reduction", "accept_length", "draft_ms_per_step",
                                             "measured_tokens_per_s", "same_as_plain")},
                **_with_bounds("measured_latency_s", row["measured_latency_s"]),
                **_with_bounds("measured_speedup_vs_full", row["measured_speedup_vs_full"]),
                **_with_bounds("measured_speedup_vs_plain", row["measured_speedup_vs_plain"]),
                **_with_bounds("measured_speedup_vs_pruned", row["measured_speedup_vs_pruned"]),
                "prompts": comparison["prompts"], "k_stability_mean": stability.get("k_mean"),
                "k_stability_min": stability.get("k_min"), "k_stability_max": stability.get("k_max"),
                "k_stability_jaccard": stability.get("jaccard_mean"),
            })
    frame = pd.DataFrame(rows, columns=VOCAB_COMPARISON_COLUMNS)
    return frame[frame["in_domain"] == where]


def merged_config_map(records: Sequence[JobRecord], strategy: str = "bfs") -> ConfigMap:
    """One config map over every domain: each domain's latest `strategy` job, else its latest job.
    Trimmed draft vocabularies travel inside the per-domain entries (`draft_vocab_ids`)."""
    jobs = [r for r in tss_jobs([r for r in records if r.directory is not None], strategy).values()]
    if not jobs:
        raise ReportError("no job folder with a config map to merge")
    try:
        return merge_config_maps([load_config_map(r.directory / "config_map.yaml") for r in jobs])
    except ConfigMapError as err:
        raise ReportError(str(err)) from None


ROUTING_COLUMNS = ["domain", "test_prompts", "routed_right", "accuracy", "accuracy_ci", "most_confused_with"]


def routing_table(records: Sequence[JobRecord], merged: ConfigMap, strategy: str = "bfs") -> pd.DataFrame:
    """Held-out routing accuracy of the runtime's default router: TF-IDF fitted on the calibration
    prompts the merged config map records (`map_routing_prompts`), scored on each mapped job's test
    split; a last "all" row pools them."""
    router = make_router("tfidf").fit(map_routing_prompts(merged))
    rows, hits_all = [], []
    for domain, test in mapped_test_splits(records, merged, strategy).items():
        predicted = [router.predict("\n\n".join(ex.turns))[0] for ex in test]
        hits = [p == domain for p in predicted]
        hits_all += hits
        wrong = Counter(p for p in predicted if p != domain).most_common(1)
        rows.append(_routing_row(domain, hits, f"{wrong[0][0]} ({wrong[0][1]})" if wrong else None))
    if len(rows) > 1:
        rows.append(_routing_row("all", hits_all, None))
    return pd.DataFrame(rows, columns=ROUTING_COLUMNS)


def mapped_test_splits(records: Sequence[JobRecord], merged: ConfigMap, strategy: str = "bfs",
                       split: str = "test") -> dict[str, list]:
    """{domain: its job's held-out test examples (or `split`'s)} for each domain of the merged map."""
    splits = {}
    for (_, domain), record in sorted(tss_jobs(records, strategy).items()):
        spec = (record.reproduce.get("evaluation_spec") or {}).get("domain")
        if domain in merged.domains and spec:
            splits[domain] = Domain.from_record(spec).load(split)
    return splits


def _run_settings(spec: dict[str, Any]) -> dict[str, Any]:
    """What a job ran with (model, drafter, generation), from its reproduce.json's evaluation_spec."""
    settings = {key: spec.get(key) for key in ("model", "dtype", "device", "forward_path", "generation")}
    drafter = spec.get("drafter")
    settings["drafter"] = drafter and {"class_path": drafter.get("class_path"), "options": drafter.get("options", {})}
    return settings


def mixed_stream_row(records: Sequence[JobRecord], merged: ConfigMap, per_domain: int, strategy: str = "bfs",
                     progress: bool = True, serve_inconclusive: bool = False) -> dict[str, Any]:
    """Table 1's mixed-stream row: `per_domain` test prompts of every mapped domain through the
    runtime controller (the default router, fitted on the map's calibration prompts; held picks only
    unless `serve_inconclusive`, as serving routes them) against dense, timed side by side now, with
    the model, drafter and generation settings of the jobs."""
    jobs = [r for (_, domain), r in tss_jobs(records, strategy).items() if domain in merged.domains]
    settings = [_run_settings(r.reproduce.get("evaluation_spec") or {}) for r in jobs]
    shared = {json.dumps({**s, "drafter": (s["drafter"] or {}).get("class_path")}, sort_keys=True) for s in settings}
    if len(shared) != 1:
        raise ReportError("--mixed-stream needs jobs of one model, drafter kind and generation setting; "
                          f"these jobs have {len(shared)}: pass the folders of one sweep")
    spec = settings[0]
    if spec["model"] is None:
        raise ReportError("--mixed-stream needs the jobs' reproduce.json (their folders, not bare summaries)")
    target = load_model_cached(spec["model"], spec["dtype"], spec["device"], spec.get("forward_path", "auto"))
    drafter = Component(spec["drafter"]["class_path"], spec["drafter"]["options"])  # a map of an earlier version names it only
    # What the drafter learns before it drafts (a corpus, a warm table) leaves out every prompt the jobs
    # measured, the stream's among them, as each job's own drafter did (`ConfiguredDrafter.job_context`). A domain
    # whose job ran another drafter (its own EAGLE head) is served with it (`DomainConfig.drafter`).
    measured = sorted({ex.id for split in ("calibration", "test")
                       for examples in mapped_test_splits(records, merged, strategy, split).values() for ex in examples})
    def factory(component: Component) -> DrafterFactory:
        return drafter_factory(component, **({"exclude_ids": measured} if "exclude_ids" in component.cls.job_context else {}))

    own = {name: factory(d.drafter) for name, d in merged.domains.items() if d.drafter is not None}
    controller = Controller(target, merged, factory(merged.drafter if isinstance(merged.drafter, Component) else drafter),
                            make_router("tfidf").fit(map_routing_prompts(merged)), serve_inconclusive=serve_inconclusive,
                            domain_drafters=own)
    stream = round_robin(mapped_test_splits(records, merged, strategy), per_domain)
    result = run_mixed_stream(controller, stream, GenerationConfig(**spec["generation"]), progress)
    return {
        "model": jobs[0].model, "method": jobs[0].drafter, "domain": "mixed stream", "strategy": "controller",
        "split": "test", "accept_native": result.accept_dense, "accept_tss": result.accept_controller,
        "measured_tokens_per_s_native": result.timing.tokens_per_s[0],
        "measured_tokens_per_s_tss": result.timing.tokens_per_s[1],
        **_with_bounds("measured_speedup", result.timing.speedup("controller", "dense")),
        "verdict": f"{result.requests} requests, routed right {result.routed_right}, ran sparse {result.ran_sparse}",
    }


def _routing_row(domain: str, hits: list[bool], confused: str | None) -> dict[str, Any]:
    accuracy = mean_interval(hits)
    return {"domain": domain, "test_prompts": len(hits), "routed_right": sum(hits), "accuracy": accuracy.point,
            "accuracy_ci": f"{accuracy.low:.3f}-{accuracy.high:.3f}", "most_confused_with": confused}
