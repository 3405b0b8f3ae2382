"""One job: search on a domain's calibration split, evaluate dense vs the selected configuration on
the held-out test split, and write the domain config map, the measured configurations and a summary.

    plan = build_plan(config, output_dir=...)    # specsparse.jobs.config: every check happens there
    job = run_plan(plan)                          # runner, logger, reproduce.json around run_job
    results_table(job)                            # the text run.py prints (specsparse.jobs.outputs)

A finished job is a `JobResult` (specsparse.jobs.result); `specsparse.jobs.outputs` writes it.

`run_job` is the recipe over a `specsparse.study.Study`, the job's only handle on measuring (store
keys, pricing, the search context, the draft vocabulary); the runner measures
(`specsparse.study.runners`), and everything is written from this process, so results do not depend on
which runner measured them.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from specsparse.decoding.models import LOADED
from specsparse.jobs.config import ConfigError, JobPlan
from specsparse.jobs.outputs import write_job_outputs
from specsparse.jobs.reproduce import cost_profiles, reproduce_record
from specsparse.jobs.result import JobResult
from specsparse.measuring.evaluation import EvaluationSpec
from specsparse.measuring.timing import SideBySide
from specsparse.search.base import SearchResult
from specsparse.search.rule import TSSRule
from specsparse.study.driver import OnTold
from specsparse.study.runners import Runner
from specsparse.study.store import ResultsStore
from specsparse.study.study import Study
from specsparse.study.vocab_comparison import VocabComparisonSpec
from specsparse.types import Candidate, Component
from specsparse.util import atomic_write_text, first_line, strict_json, utc_now

log = logging.getLogger(__name__)


def run_job(
    spec: EvaluationSpec,
    search: Component,
    runner: Runner,
    store: ResultsStore,
    output_dir: Path,
    max_measurements: int | None = None,
    evaluate_test: bool = True,
    on_told: OnTold | None = None,
    progress: bool = True,
    timing_prompts: int | None = 24,
    vocab_comparison: VocabComparisonSpec | None = None,
    objective_timing: tuple[int | None, int] | None = None,
) -> JobResult:
    """Search on `spec`'s calibration split, evaluate on its test split, write outputs to `output_dir`.
    vocab_comparison (search=tpe_vocab): then the vocabulary paper's comparison on the test split.
    objective_timing (calibration prompts, repeats): time plain decoding, dense and the pick side by side on
    the calibration split, for a sweeper's objective (a select="measured" timing already holds them).
    Whatever needs the model runs through the Study, where its runner measures."""
    start = time.perf_counter()
    study = Study(spec, runner, store, progress, on_told)
    context = study.search_context(search.cls.context_arguments)
    try:
        strategy = context.build(search)
    except (TypeError, ValueError) as err:  # option values only a model and its data can check
        raise ConfigError(f"search {search.name}: {first_line(err)}") from None
    result = study.search(strategy, max_measurements)
    rule = getattr(strategy, "rule", None)
    calibration_timing = None
    if rule is not None and rule.select == "measured" and result.selected != result.baseline:
        front = [result.selected, *(c for c, _ in result.alternatives)][:rule.measured_candidates]
        calibration_timing = study.time("calibration", labelled([result.baseline, *front]), rule.measured_prompts,
                                        progress=progress)
        result = pick_by_timing(result, calibration_timing)
    elif objective_timing is not None:
        prompts, repeats = objective_timing
        calibration_timing = study.time("calibration", labelled([result.baseline, result.selected]), prompts,
                                        repeats, progress=progress)
    test_dense = test_selected = timing = draws_test = compared = None
    if evaluate_test:
        if vocab_comparison is not None:  # its side-by-side timing holds plain, dense and selected too
            compared, timing = study.compare_vocabularies(strategy, vocab_comparison, timing_prompts, progress)
        test_dense, test_selected = study.measure([result.baseline, result.selected], "test")
        timing = timing or study.time("test", {"dense": result.baseline} | (
            {} if result.selected == result.baseline else {"selected": result.selected}), timing_prompts, progress=progress)
        if result.info.get("draws"):  # random search is reported as the mean over its draws too
            draws_test = study.measure([Candidate(tuple(d)) for d in result.info["draws"]], "test")
    vocab_size = result.selected.vocab_size
    job = JobResult(
        domain=spec.domain.name, search_result=result, test_dense=test_dense, test_selected=test_selected,
        output_dir=Path(output_dir), wall_time_s=time.perf_counter() - start, num_layers=context.num_layers,
        description=study.description("calibration"), timing=timing, eps_metric=getattr(strategy, "rule", TSSRule()).eps_metric,
        metric=spec.domain.metric, guard=strategy.quality_guard(), draws_test=draws_test,
        vocab_comparison=compared, cost_profiles=cost_profiles(runner), calibration_timing=calibration_timing,
        recorded_drafter=study.recorded_drafter,
        draft_vocab_ids=None if vocab_size is None else tuple(study.vocabulary.ids(vocab_size)),
        vocab_corpus=study.vocabulary.provenance if strategy.trims_vocabulary else None,
    )
    write_job_outputs(job, study.examples("calibration"), study.examples("test") if evaluate_test else ())
    return job


def labelled(candidates: list[Candidate]) -> dict[str, Candidate]:
    """Candidates by their own labels (each once): what a calibration timing names them."""
    return {c.label: c for c in candidates}


def pick_by_timing(result: SearchResult, timing: SideBySide) -> SearchResult:
    """`result` with the timed configuration of the highest measured tokens/s selected (dense among them:
    the empty skip set is feasible too), the rest of the front as its alternatives (the timed ones
    first), and the timing in `info["measured_selection"]` beside each candidate's modeled speedup over
    dense."""
    measured = dict(result.history)
    front = [result.selected, *(c for c, _ in result.alternatives)]
    by_label = {c.label: c for c in (result.baseline, *front)}
    timed = [by_label[label] for label in timing.labels if label != "plain"]
    rate = dict(zip(timing.labels, timing.tokens_per_s))
    chosen = max(timed, key=lambda c: rate[c.label])
    dense, dense_rate = result.baseline.label, measured[result.baseline].modeled_tokens_per_s
    rows = [{"configuration": c.label, "modeled_speedup_vs_dense": measured[c].modeled_tokens_per_s / dense_rate if dense_rate else None,
             "measured_speedup_vs_dense": [1.0, 1.0, 1.0] if c.label == dense else timing.speedup(c.label, dense),
             "measured_tokens_per_s": rate[c.label]} for c in timed]
    modeled_pick = result.selected.label
    note = (f"select=measured: {chosen.label} had the lowest measured time per token of {len(timed)} configurations timed "
            f"side by side on {timing.prompts} calibration prompts (the modeled pick was {modeled_pick})")
    untimed = [c for c in front if c not in timed]
    alternatives = tuple((c, measured[c]) for c in (*timed[1:], *untimed) if c != chosen)  # the timed ones first
    notes = (*result.notes, note, *(("dense measured fastest: the dense target is kept",) if chosen == result.baseline else ()))
    return replace(result, selected=chosen, selected_measurement=measured[chosen], alternatives=alternatives, notes=notes,
                   info={**result.info, "measured_selection": rows, "modeled_pick": modeled_pick})


def run_plan(plan: JobPlan) -> JobResult:
    """Run the job: search, held-out test evaluation, outputs, reproduce.json, logging.

    Writes into plan.output_dir: reproduce.json (at the start, completed at the end), config_map.{yaml,json},
    measurements.csv, summary.json (see `run_job`), and the logger's files.
    """
    out = plan.output_dir
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    record = reproduce_record(plan)
    _write_json(out / "reproduce.json", {**record, "status": "running"})
    store = runner = logger = None
    status = "failed"
    try:
        store = ResultsStore(plan.store_path)
        try:
            runner = plan.runner.build(output_dir=out)
        except ValueError as err:  # e.g. GPUs the cluster does not have: before any model loads
            raise ConfigError(f"runner {plan.runner.name}: {first_line(err)}") from None
        if plan.logger is not None:
            logger = plan.logger.build()
            logger.start(  # group (the sweep) and a unique run name derive from `out`
                output_dir=out,
                config=plan.config,
                tags=[f"model:{plan.model.name}", f"drafter:{plan.drafter_name}",
                      f"domain:{plan.evaluation.domain.name}", f"search:{plan.search_name}",
                      f"experiment:{plan.experiment}"],
            )
        job = run_job(
            plan.evaluation, plan.search, runner, store, out, plan.max_measurements, plan.evaluate_test,
            on_told=logger.on_told if logger is not None else None, progress=plan.progress,
            timing_prompts=plan.timing_prompts, vocab_comparison=plan.vocab_comparison,
            objective_timing=plan.objective_timing,
        )
        identity = job.description
        record.update(
            model_identity=identity["model_identity"], code_version=identity["code_version"],
            num_layers=job.num_layers, cost_profile=job.cost_profiles,
            timing_hardware=job.timing.hardware if job.timing is not None else None,
            models_loaded_by_job_process=list(LOADED), ray_workers=getattr(runner, "placements", None),
        )
        log.info("models loaded in the job's process: %s", ", ".join(LOADED) or
                 "none (every model loaded on the runner's workers)")
        if plan.model.num_layers not in (None, job.num_layers):
            log.warning("model.num_layers=%s in the config, but %s has %d layers: fix conf/model/%s.yaml",
                        plan.model.num_layers, plan.model.source, job.num_layers, plan.model.name)
        if logger is not None:
            logger.finish(job, model=plan.model.name, num_layers=job.num_layers, cost_profile=record["cost_profile"])
        status = "finished"
        return job
    except KeyboardInterrupt:  # Ctrl-C, and SIGTERM (run.py turns it into JobTerminated)
        status = "terminated" if isinstance(sys.exc_info()[1], JobTerminated) else "interrupted"
        raise
    finally:
        if logger is not None:
            logger.close(ok=status == "finished")
        if runner is not None:
            runner.close()
        if store is not None:
            store.close()
        record.update(status=status, finished=utc_now(), wall_time_s=round(time.time() - start, 3))
        _write_json(out / "reproduce.json", record)


class JobTerminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the job records "terminated" and cleans up."""


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, strict_json(data))
