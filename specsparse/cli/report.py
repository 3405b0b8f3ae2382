"""`specsparse report`: tables, plots and a merged config map from job outputs or W&B runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from specsparse.cli.common import fail
from specsparse.util import file_in_the_way, first_line


def add_report_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="build Table 1/2 (Markdown, LaTeX, CSV), Pareto and ablation plots, and a merged config map",
        description="Tables and figures from job outputs (summary.json under the given folders) and the results "
                    "store, or from W&B runs with --wandb.",
    )
    p.add_argument("paths", nargs="*", help="job or multirun folders (default: outputs/)")
    p.add_argument("--out", default=None, help="output folder (default: <first path>/report, or report/ with --wandb)")
    p.add_argument("--store", action="append", default=[],
                   help="results store(s) for the single-layer ablation (default: the stores the jobs used)")
    p.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the jobs from W&B runs instead of folders")
    p.add_argument("--strategy", default="bfs", help="the TSS strategy of Table 1, plots and the merged map (default: bfs)")
    p.add_argument("--merge-config-map", metavar="PATH", help="write one multi-domain config map (PATH.yaml and PATH.json)")
    p.add_argument("--serve-inconclusive", action="store_true",
                   help="route picks whose held-out verdict is inconclusive too, in --mixed-stream and in what "
                        "the merged map's summary says serving runs (default: held picks only; see serve)")
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.add_argument("--publish", metavar="ENTITY/PROJECT",
                   help="build a W&B Report of the tables and Pareto panels (wandb-workspaces): saved to W&B when "
                        "online, else its definition is written to <out>/wandb_report.json")
    p.add_argument("--mixed-stream", type=int, metavar="N",
                   help="add Table 1's mixed-stream row: N test prompts per domain through the runtime controller "
                        "vs dense, timed now (loads the model); a domain with fewer test prompts gives all it has, "
                        "so a huge N runs every test prompt of every domain")
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from specsparse.config_map import ConfigMapError, load_config_map, serving_plan  # noqa: PLC0415
    from specsparse.reporting.records import ReportError  # noqa: PLC0415
    from specsparse.reporting.report import build_report, find_jobs, wandb_jobs  # noqa: PLC0415
    from specsparse.study.store import StoreError  # noqa: PLC0415

    if args.merge_config_map and (blocker := file_in_the_way(Path(args.merge_config_map).parent)) is not None:
        return fail(f"--merge-config-map {args.merge_config_map}: {blocker} is a file: give a path in a folder "
                    "(PATH.yaml and PATH.json are written there)")
    if args.mixed_stream is not None and args.mixed_stream < 1:
        return fail(f"--mixed-stream must be >= 1 test prompts per domain, got {args.mixed_stream}")
    for flag, value in (("--wandb", args.wandb), ("--publish", args.publish)):
        if value is not None and (value.count("/") != 1 or not all(value.split("/"))):
            return fail(f"{flag} takes ENTITY/PROJECT, got {value!r}")
    try:
        if args.wandb:
            try:
                records = wandb_jobs(args.wandb)
            except ReportError:
                raise
            except Exception as err:  # noqa: BLE001 - the server's errors (no such project, unreachable), in one line
                return fail(f"W&B {args.wandb}: {first_line(err)}")
            out = Path(args.out or "report")
        else:
            paths = args.paths or ["outputs"]
            records = find_jobs(paths)
            out = Path(args.out or Path(paths[0]) / "report")
        written = build_report(records, out, stores=args.store, strategy=args.strategy,
                               merge_config_map=args.merge_config_map, plots=not args.no_plots and not args.wandb,
                               mixed_stream=args.mixed_stream, serve_inconclusive=args.serve_inconclusive)
    except (ReportError, ConfigMapError, StoreError) as err:
        return fail(str(err))
    for kind, heading in (("table1", "Table 1: native vs TSS per domain"), ("table2", "Table 2: search strategies per domain")):
        print(heading)
        print(written[kind][0].read_text())
    if args.publish:
        from specsparse.reporting.wandb_report import job_group, publish, report_definition  # noqa: PLC0415

        headings = {"table1": "Table 1: native vs TSS per domain", "table2": "Table 2: search strategies per domain",
                    "table_vocab": "Draft vocabulary trimming, in and out of domain",
                    "routing": "Routing on held-out prompts"}
        entity, project = args.publish.split("/")
        experiments = sorted({str(r.reproduce.get("experiment") or "specsparse") for r in records})
        definition = report_definition(
            entity, project, f"specsparse: {', '.join(experiments)}",
            {heading: written[kind][0].read_text() for kind, heading in headings.items() if kind in written},
            sorted({r.domain for r in records}), description=f"{len(records)} job(s), built by specsparse report",
            groups=sorted({g for g in map(job_group, records) if g}),  # panels show these jobs' runs only
        )
        try:
            path, url = publish(definition, out)
        except Exception as err:  # noqa: BLE001 - the server's or wandb-workspaces' error, in one line
            return fail(f"W&B report: {first_line(err)}")
        written["wandb_report"] = [path]
        print(f"W&B report: {url}" if url else "W&B report: offline, definition written (rerun with WANDB_MODE=online "
              "and an API key to publish it)")
    if args.merge_config_map:
        merged = load_config_map(written["config_map"][0])
        for line in serving_plan(merged, args.serve_inconclusive)[1]:
            print(f"serve will route {line}")
    for kind, paths in written.items():
        for path in paths:
            print(f"{kind}: {path}")
    return 0
