"""The `specsparse` command.

    specsparse run -m domain=qa,mmlu search=bfs       (a job or sweep: `python run.py ...` of a checkout)
    specsparse report outputs/multirun/2025-01-01_10-00-00 [--out DIR] [--merge-config-map maps/all.yaml]
    specsparse report --wandb ENTITY/PROJECT --out report/
    specsparse submit --address http://HEAD:8265 -- python run.py -m experiment=tss_main runner=ray
    specsparse generate --config-map maps/all.yaml "What is the capital of Canada?"
    specsparse generate --config-map maps/all.yaml --prompts prompts.jsonl --output results.jsonl
    specsparse serve --config-map maps/all.yaml --port 8000 --max-queue 8
    specsparse profile [--model smollm2-135m] [--dtype float32] [--force]   (the cost profile)
    specsparse train-drafter --output drafters/smollm2-eagle [--vocab-size 8192]   (an EAGLE head)
    specsparse export --config-map maps/all.yaml --domain qa --token-map qa.pt   (SGLang --speculative-token-map)

Jobs and sweeps run through Hydra: `specsparse run ...` or, in a checkout, `python run.py ...`. Every subcommand returns an exit
code; bad input prints one line on stderr and exits with 2. Each subcommand lives in its own module here
(generate and serve share one); this module only assembles the parser.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from specsparse.cli.export import add_export_command
from specsparse.cli.profile import add_profile_command
from specsparse.cli.report import add_report_command
from specsparse.cli.run import add_run_command
from specsparse.cli.runtime import add_runtime_commands
from specsparse.cli.submit import add_submit_command
from specsparse.cli.train_drafter import add_train_drafter_command


class OneLineParser(argparse.ArgumentParser):
    """Usage errors (a missing or malformed option) in one line, exit code 2, as every other error."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="specsparse",
        description="Per-domain target-layer skipping and draft-vocabulary trimming for speculative decoding. "
                    "Jobs and sweeps: specsparse run (Hydra; python run.py in a checkout).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command_name", metavar="COMMAND")
    add_run_command(subparsers)
    add_report_command(subparsers)
    add_submit_command(subparsers)
    add_runtime_commands(subparsers)
    add_profile_command(subparsers)
    add_train_drafter_command(subparsers)
    add_export_command(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)
