"""A W&B Report of a sweep, built with wandb-workspaces: the report's tables as Markdown blocks, then
per domain a panel grid over that domain's runs with the Pareto front table, the jobs' speedup and Pareto
figures, every measured configuration, accept length against the measured speedup over plain decoding,
and that speedup on the calibration split (what a sweep chose by) against the test split (held out).

    specsparse report outputs/multirun/<date> --publish ENTITY/PROJECT

The report is first written as a plain definition (`wandb_report.json` beside the tables: blocks and
panels by wandb-workspaces class name), which `to_wandb_report` turns into `wandb_workspaces`
objects. Online (WANDB_MODE=online and an API key exists) the report is saved to W&B and its
URL returned; otherwise only the definition is written, and the same command run online publishes it.
Runs are matched by the W&B logger's conventions: project ENTITY/PROJECT, the reported jobs' groups
(their sweeps, `job_group`) and config `domain.name`, so a panel never mixes in other sweeps' runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specsparse.extras import require
from specsparse.reporting.wandb_logger import ALIASES, has_api_key, import_wandb, run_identity
from specsparse.util import atomic_write_text

DEFINITION = "wandb_report.json"


def job_group(record: Any) -> str | None:
    """The W&B group of a report.JobRecord's run: logger.group from its config when set, else derived
    from its folder as the logger did; for a record read from W&B, the `wandb_group` its summary holds."""
    if record.directory is None:
        return record.summary.get("wandb_group")
    logger = (record.reproduce.get("config") or {}).get("logger") or {}
    return run_identity(record.directory, logger.get("group"))[0]


def runset_filters(domain: str, groups: Sequence[str]) -> str:
    """wandb-workspaces filter expression: runs of these W&B groups (any, when none) AND this domain."""
    by_domain = f"Config('domain.name') = {domain!r}"
    return f"Metric('Group') in {sorted(groups)!r} and {by_domain}" if groups else by_domain


def report_definition(
    entity: str, project: str, title: str, tables: Mapping[str, str], domains: Sequence[str],
    description: str = "", groups: Sequence[str] = (),
) -> dict[str, Any]:
    """The report as plain data. tables: {heading: Markdown table}, in order. groups: the reported
    jobs' W&B groups, to which every panel is scoped (none: every run of the project for that domain)."""
    blocks: list[dict[str, Any]] = []
    for heading, markdown in tables.items():
        blocks += [{"type": "H1", "text": heading}, {"type": "MarkdownBlock", "text": markdown}]
    blocks.append({"type": "H1", "text": "Pareto fronts per domain"})
    for domain in domains:
        blocks += [
            {"type": "H2", "text": domain},
            {"type": "PanelGrid", "runset": {"name": domain, "filters": runset_filters(domain, groups)},
             "panels": [
                 {"type": "WeavePanelSummaryTable", "table_name": "pareto_front"},
                 {"type": "MediaBrowser", "media_keys": ["speedup_plot", "pareto_plot"]},
                 {"type": "WeavePanelSummaryTable", "table_name": "measurements"},
                 {"type": "ScatterPlot", "title": "accept length (test) vs measured speedup over plain decoding",
                  "x": "test.selected.accept_length", "y": "measured_speedup_test_vs_plain"},
                 {"type": "ScatterPlot", "title": "measured speedup over plain: calibration (chosen by) vs test (held out)",
                  "x": "measured_speedup_calibration_vs_plain", "y": "measured_speedup_test_vs_plain"},
             ]},
        ]
    return {"entity": entity, "project": project, "title": title[:128], "description": description, "blocks": blocks}


def to_wandb_report(definition: Mapping[str, Any]):
    """wandb_workspaces objects for a definition (building them needs no server)."""
    import_wandb()  # wandb-workspaces imports wandb: keep its temporary folders in ours
    wr = require("wandb_workspaces.reports.v2", extra="wandb")

    entity, project = definition["entity"], definition["project"]

    def panel(spec: Mapping[str, Any]):
        options = {k: v for k, v in spec.items() if k != "type"}
        if spec["type"] == "ScatterPlot":
            options.update(x=wr.SummaryMetric(spec["x"]), y=wr.SummaryMetric(spec["y"]))
        return getattr(wr, spec["type"])(**options)

    def block(spec: Mapping[str, Any]):
        if spec["type"] == "PanelGrid":
            runset = wr.Runset(entity=entity, project=project, **spec["runset"])
            return wr.PanelGrid(runsets=[runset], panels=[panel(p) for p in spec["panels"]])
        return getattr(wr, spec["type"])(text=spec["text"])

    return wr.Report(entity=entity, project=project, title=definition["title"],
                     description=definition["description"], blocks=[block(b) for b in definition["blocks"]])


def publish(definition: Mapping[str, Any], out_dir: str | os.PathLike) -> tuple[Path, str | None]:
    """Write the definition; save the report to W&B when online. Returns (definition file, URL or None)."""
    path = atomic_write_text(Path(out_dir) / DEFINITION, json.dumps(definition, indent=2) + "\n")
    report = to_wandb_report(definition)  # a definition wandb-workspaces rejects fails here, offline too
    mode = os.environ.get("WANDB_MODE", "offline")
    if ALIASES.get(mode, mode) != "online" or not has_api_key():
        return path, None
    report.save()
    return path, report.url
