"""The `specsparse` command.

    specsparse report outputs/multirun/2025-01-01_10-00-00 [--out DIR] [--merge-config-map maps/all.yaml]
    specsparse report --wandb ENTITY/PROJECT --out report/
    specsparse submit --address http://HEAD:8265 -- python run.py -m experiment=tss_main runner=ray
    specsparse generate --config-map maps/all.yaml "What is the capital of Canada?"
    specsparse generate --config-map maps/all.yaml --prompts prompts.jsonl --output results.jsonl
    specsparse serve --config-map maps/all.yaml --port 8000 --max-queue 8
    specsparse profile [--model smollm2-135m] [--dtype float32] [--force]   (the cost profile)
    specsparse train-drafter --output drafters/smollm2-eagle [--vocab-size 8192]   (an EAGLE head)
    specsparse export --config-map maps/all.yaml --domain qa --token-map qa.pt   (SGLang --speculative-token-map)

Sweeps themselves run through Hydra: `python run.py ...` (see run.py). Every subcommand returns an exit
code; bad input prints one line on stderr and exits with 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsparse.data.prompts import PromptRecord, read_prompt_records
from specsparse.decoding.models import ModelLoadError
from specsparse.drafters.eagle_training import TrainingRecipe
from specsparse.types import GenerationConfig
from specsparse.util import first_line

DEFAULT_DASHBOARD = "http://127.0.0.1:8265"
# Never uploaded with the working directory (besides what .gitignore excludes, which Ray honours).
SUBMIT_EXCLUDES = [".git", ".venv", "outputs", "multirun", "wandb", "__pycache__", "*.egg-info", ".pytest_cache"]


def fail(message: str) -> int:
    """One line on stderr, exit code 2: how every command reports bad input."""
    print(f"specsparse: error: {message}", file=sys.stderr)
    return 2


# -- report ----------------------------------------------------------------------------------------
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
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.add_argument("--publish", metavar="ENTITY/PROJECT",
                   help="build a W&B Report of the tables and Pareto panels (wandb-workspaces): saved to W&B when "
                        "online, else its definition is written to <out>/wandb_report.json")
    p.add_argument("--mixed-stream", type=int, metavar="N",
                   help="add Table 1's mixed-stream row: N test prompts per domain through the runtime controller "
                        "vs dense, timed now (loads the model)")
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from specsparse.config_map import ConfigMapError  # noqa: PLC0415
    from specsparse.reporting.report import ReportError, build_report, find_jobs, wandb_jobs  # noqa: PLC0415
    from specsparse.study.store import StoreError  # noqa: PLC0415

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
                               mixed_stream=args.mixed_stream)
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
    for kind, paths in written.items():
        for path in paths:
            print(f"{kind}: {path}")
    return 0


# -- submit ----------------------------------------------------------------------------------------
def add_submit_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "submit",
        help="run a command (e.g. a Hydra sweep) as a Ray job on a cluster",
        description="Wraps `ray job submit --address ... --working-dir . --runtime-env-json ... -- COMMAND`. "
                    "Token auth: `ray job submit` reads RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token.",
    )
    p.add_argument("--address", default=None,
                   help=f"the cluster's dashboard address (default: $RAY_API_SERVER_ADDRESS, $RAY_ADDRESS or {DEFAULT_DASHBOARD})")
    p.add_argument("--working-dir", default=".", help="folder uploaded as the job's working directory (default: .)")
    p.add_argument("--pip", action="append", default=[], metavar="REQUIREMENT",
                   help="a pip requirement installed for the job (repeatable)")
    p.add_argument("--pip-from-pyproject", action="store_true",
                   help="install the project's dependencies from pyproject.toml in the job's environment")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="an environment variable of the job")
    p.add_argument("--submission-id", default=None, help="job id (default: Ray picks one)")
    p.add_argument("--no-wait", action="store_true", help="return once submitted instead of following the logs")
    p.add_argument("--dry-run", action="store_true", help="print the `ray job submit` command and exit")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- python run.py -m ...")
    p.set_defaults(func=run_submit)


def pyproject_dependencies(working_dir: Path) -> list[str]:
    if sys.version_info >= (3, 11):
        import tomllib  # noqa: PLC0415
    else:  # Python 3.10: the same parser, as the tomli package
        import tomli as tomllib  # noqa: PLC0415

    file = working_dir / "pyproject.toml"
    if not file.is_file():
        raise ValueError(f"{file} not found (--pip-from-pyproject)")
    return list(tomllib.loads(file.read_text()).get("project", {}).get("dependencies", []))


def runtime_env(working_dir: Path, pip: Sequence[str] = (), env: Sequence[str] = (), from_pyproject: bool = False) -> dict:
    """The job's runtime environment: pip requirements, environment variables and upload excludes."""
    requirements = [*(pyproject_dependencies(working_dir) if from_pyproject else []), *pip]
    env_vars = {}
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env takes KEY=VALUE, got {item!r}")
        env_vars[key] = value
    # W&B stays offline on the cluster unless asked otherwise: an unreachable server would stall jobs.
    env_vars.setdefault("WANDB_MODE", os.environ.get("WANDB_MODE", "offline"))
    spec: dict = {"env_vars": env_vars, "excludes": SUBMIT_EXCLUDES}
    if requirements:
        spec["pip"] = requirements
    return spec


def ray_executable() -> list[str]:
    """The `ray` CLI of this environment."""
    beside = Path(sys.executable).with_name("ray")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("ray")
    if found:
        return [found]
    raise ValueError("the `ray` command was not found: pip install 'ray[default]'")


def submit_command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("nothing to run: specsparse submit [options] -- python run.py -m ...")
    working_dir = Path(args.working_dir).resolve()
    if not working_dir.is_dir():
        raise ValueError(f"--working-dir {working_dir} is not a folder")
    address = args.address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or DEFAULT_DASHBOARD
    env = runtime_env(working_dir, args.pip, args.env, args.pip_from_pyproject)
    cmd = [*ray_executable(), "job", "submit", "--address", address, "--working-dir", str(working_dir),
           "--runtime-env-json", json.dumps(env)]
    if args.submission_id:
        cmd += ["--submission-id", args.submission_id]
    if args.no_wait:
        cmd.append("--no-wait")
    return [*cmd, "--", *command]


def run_submit(args: argparse.Namespace) -> int:
    try:
        cmd = submit_command(args)
    except ValueError as err:
        return fail(str(err))
    if args.dry_run:
        import shlex  # noqa: PLC0415

        print(shlex.join(cmd))
        return 0
    return subprocess.call(cmd)


# -- profile ---------------------------------------------------------------------------------------
def add_profile_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "profile",
        help="measure (or show) the model's cost profile that searches price configurations with",
        description="Times target forwards over kept layers and chunk lengths (the fastest of interleaved "
                    "repeats), fits the cost model with non-negative coefficients, checks it, and stores it beside "
                    "the model cache; prints each check and what identifies the profile. A stored profile that fails "
                    "a check is measured again. See specsparse/measuring/profile.py.",
    )
    p.add_argument("--model", default="smollm2-135m", help="any model source run.py accepts (default: smollm2-135m)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    p.add_argument("--force", action="store_true", help="measure again even when a profile is stored")
    p.set_defaults(func=run_profile)


def set_threads(threads: int | None) -> int | None:
    """Set torch's intra-op thread count (None: leave torch's own); `fail`'s exit code for a bad count."""
    if threads is None:
        return None
    if threads < 1:
        return fail(f"--threads {threads}: give a positive thread count")
    import torch  # noqa: PLC0415

    torch.set_num_threads(threads)
    return None


def missing_model(source: str) -> str | None:
    """The one-line error for a model source that names a local path that is not there (else None)."""
    if source.startswith(("/", "./", "../", "~")) or source.endswith(".gguf"):
        if not Path(source).expanduser().exists():
            return f"--model {source}: no such file or folder (give an embedded name, a .gguf, a model folder or a Hub id)"
    return None


def run_profile(args: argparse.Namespace) -> int:
    from specsparse.decoding.models import load_model  # noqa: PLC0415
    from specsparse.measuring.profile import (  # noqa: PLC0415
        ProfileError,
        measure_checked_profile,
        profile_checks,
        profile_for,
        profile_record,
        save_profile,
    )

    if (code := set_threads(args.threads)) is not None:
        return code
    if message := missing_model(args.model):
        return fail(message)
    try:
        loaded = load_model(args.model, dtype=args.dtype, device=args.device)
    except (ModelLoadError, ValueError) as err:
        return fail(first_line(err))
    try:
        if args.force:
            save_profile(measure_checked_profile(loaded.model, progress=True))
        profile = profile_for(loaded.model, progress=True)
    except ProfileError as err:
        return fail(first_line(err))
    record = profile_record(profile)
    print(f"cost profile: {record['path']}")
    print(f"sha256:       {record['sha256']}")
    print(f"measured at:  {record['measured_at']} (UTC), load average {record['load_average']}")
    print(f"coefficients: one token (a1, b1) = {', '.join(f'{1000 * v:.4g}' for v in profile.single)} ms; "
          f"more (a, b, c, d) = {', '.join(f'{1000 * v:.4g}' for v in profile.verify)} ms")
    print("checks:")
    for check in profile_checks(profile):
        print(f"  {'pass' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
    print(f"{'kept layers':>12}{'chunk':>7}{'fastest ms':>12}{'modeled ms':>12}")
    for kept, chunk, seconds in profile.samples:
        print(f"{kept:>12}{chunk:>7}{1000 * seconds:>12.2f}{1000 * profile.verify_time(kept, chunk):>12.2f}")
    return 0


# -- train-drafter ---------------------------------------------------------------------------------
def add_train_drafter_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train-drafter",
        help="train an EAGLE head for a target by self-distillation (drafter=eagle drafter.path=DIR)",
        description="Generates the target's greedy replies to training prompts, then trains a one-layer EAGLE "
                    "head on its features (smooth-L1 + 0.1 x cross-entropy); see specsparse/drafters/eagle_training.py. "
                    "Started again on the same DIR, an interrupted run resumes.",
    )
    defaults = TrainingRecipe()
    p.add_argument("--output", required=True, metavar="DIR", help="checkpoint directory (drafter.path)")
    p.add_argument("--model", default="smollm2-135m", help="target: any model source run.py accepts")
    p.add_argument("--dtype", default="float32", help="the target's dtype (the head trains in float32)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompts", default=defaults.prompts, metavar="builtin|FILE.jsonl",
                   help="builtin: the built-in sets' calibration splits (their test splits stay held out); or a "
                        "JSONL of {\"prompt\": str} / {\"turns\": [str]}")
    p.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens, help="reply length per prompt")
    p.add_argument("--sampled-replies", type=int, default=defaults.sampled_replies,
                   help="more replies per prompt, sampled at --temperature (more, varied training data)")
    p.add_argument("--temperature", type=float, default=defaults.temperature)
    p.add_argument("--epochs", type=int, default=defaults.epochs)
    p.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, help="sequences per step")
    vocab = p.add_mutually_exclusive_group()
    vocab.add_argument("--vocab-size", type=int, default=None,
                       help="trim the head to the K most frequent tokens of the training data")
    vocab.add_argument("--vocab-file", metavar="FILE.json", default=None,
                       help="trim the head to these token ids (a JSON list, e.g. a TPE search's vocabulary)")
    p.add_argument("--arch", choices=("eagle", "eagle3"), default=defaults.arch,
                   help="eagle: the EAGLE-1 layout (final-norm features, the target's LM head); eagle3: EAGLE-3 "
                        "(low/middle/high features fused, its own LM head over the draft vocabulary, training-time test)")
    p.add_argument("--ttt-steps", type=int, default=defaults.ttt_steps,
                   help="eagle3: training-time test steps (EAGLE-3 uses 7)")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    p.set_defaults(func=run_train_drafter)


def run_train_drafter(args: argparse.Namespace) -> int:
    from specsparse.decoding.models import load_model  # noqa: PLC0415
    from specsparse.drafters.eagle_training import train_eagle_head  # noqa: PLC0415

    if (code := set_threads(args.threads)) is not None:
        return code
    if message := missing_model(args.model):
        return fail(message)
    if args.prompts != "builtin" and not Path(args.prompts).is_file():
        return fail(f"--prompts {args.prompts}: no such file (give builtin or a .jsonl of prompts)")
    output = Path(args.output)
    if output.exists() and not output.is_dir():
        return fail(f"--output {output} is a file: give a folder for the checkpoint (created if missing)")
    if any(parent.exists() and not parent.is_dir() for parent in output.parents):
        return fail(f"--output {output} lies under a file: give a folder for the checkpoint")
    recipe = TrainingRecipe(
        prompts=args.prompts, max_new_tokens=args.max_new_tokens, sampled_replies=args.sampled_replies,
        temperature=args.temperature, epochs=args.epochs,
        learning_rate=args.learning_rate, batch_size=args.batch_size, vocab_size=args.vocab_size,
        vocab_file=args.vocab_file, arch=args.arch, ttt_steps=args.ttt_steps, seed=args.seed,
    )
    try:
        recipe.check()  # before the model loads; the vocabulary's size is checked once it has
        loaded = load_model(args.model, dtype=args.dtype, device=args.device)
        output = train_eagle_head(loaded, output, recipe)
    except (ModelLoadError, ValueError) as err:
        return fail(first_line(err))
    summary = json.loads((output / "training.json").read_text())
    last = summary["history"][-1]
    print(f"EAGLE head for {args.model}: {output}")
    print(f"  {summary['sequences']} sequences, {summary['tokens']} tokens, draft vocabulary {summary['draft_vocab_size']}, "
          f"{summary['seconds'] / 60:.1f} min")
    print(f"  held-out top-1 agreement with the target: {last['held_out_agreement']:.3f} (epoch {last['epoch']})")
    print(f"  use it: python run.py drafter=eagle drafter.path={output}")
    return 0


# -- export ----------------------------------------------------------------------------------------
def add_export_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a trimmed draft vocabulary as a token map (SGLang --speculative-token-map), or a trained "
             "EAGLE-3 head as a checkpoint folder of the official layout",
        description="Writes the kept token ids of a domain's trimmed draft vocabulary (from a config map, or a JSON "
                    "list) as the file SGLang's --speculative-token-map loads: a list of ids that torch.load reads "
                    "with weights_only=True (FR-Spec's format). Or, with --eagle-head, copies a head "
                    "`train-drafter --arch eagle3` trained into a folder of the official EAGLE-3 layout "
                    "(config.json with LlamaForCausalLMEagle3 and draft_vocab_size; midlayer.*, fc, norm, lm_head, "
                    "d2t, t2d), which EAGLE-3 loaders read.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--config-map", metavar="PATH", help="a config map with draft_vocab_ids (search=tpe_vocab)")
    source.add_argument("--vocab-file", metavar="FILE.json", help="a JSON list of token ids")
    source.add_argument("--eagle-head", metavar="DIR", help="a head `train-drafter --arch eagle3` trained")
    p.add_argument("--domain", help="with --config-map: the domain whose vocabulary to export")
    p.add_argument("--token-map", metavar="OUT.pt", help="with --config-map or --vocab-file: the file to write")
    p.add_argument("--output", metavar="DIR", help="with --eagle-head: the folder to write (new or empty)")
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from specsparse.config_map import ConfigMapError, load_config_map  # noqa: PLC0415
    from specsparse.drafters.eagle_training import read_vocab_file  # noqa: PLC0415

    if args.eagle_head:
        return export_eagle_head(args)
    if not args.token_map or args.output:
        return fail("--config-map and --vocab-file write --token-map OUT.pt (--output is for --eagle-head)")
    out = Path(args.token_map)
    if out.is_dir() or not out.parent.is_dir():
        return fail(f"--token-map {out}: give a file path in an existing folder")
    if args.vocab_file:
        if args.domain:
            return fail("--domain picks a domain of --config-map; a --vocab-file is one vocabulary")
        try:
            ids = read_vocab_file(args.vocab_file)
        except ValueError as err:
            return fail(str(err))
    else:
        try:
            domains = load_config_map(args.config_map).domains
        except (ConfigMapError, OSError) as err:
            return fail(f"--config-map {args.config_map}: {first_line(err)}")
        trimmed = sorted(d for d, entry in domains.items() if entry.draft_vocab_ids)
        if args.domain not in trimmed:
            return fail(f"--domain {args.domain}: give one of the domains with a trimmed vocabulary in this map "
                        f"({', '.join(trimmed) or 'none: run search=tpe_vocab'})")
        ids = list(domains[args.domain].draft_vocab_ids)
    import torch  # noqa: PLC0415

    tmp = out.with_name(f".{out.name}.tmp")
    torch.save([int(i) for i in ids], tmp)
    tmp.replace(out)  # whole or absent
    print(f"token map: {out} ({len(ids)} ids); SGLang: --speculative-token-map {out}")
    return 0


def export_eagle_head(args: argparse.Namespace) -> int:
    """--eagle-head DIR --output FOLDER: the checkpoint in the official EAGLE-3 layout."""
    import shutil  # noqa: PLC0415

    from specsparse.drafters.eagle import official_eagle3_config  # noqa: PLC0415

    if not args.output or args.token_map or args.domain:
        return fail("--eagle-head writes a checkpoint folder: give --output DIR (not --token-map or --domain)")
    head, out = Path(args.eagle_head), Path(args.output)
    try:
        config = official_eagle3_config(head)
    except ValueError as err:
        return fail(f"--eagle-head {head}: {first_line(err)}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return fail(f"--output {out}: give a new or empty folder")
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copyfile(head / "model.safetensors", tmp / "model.safetensors")
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    if out.exists():
        out.rmdir()
    tmp.replace(out)  # whole or absent
    print(f"EAGLE-3 checkpoint: {out} (draft vocabulary {config['draft_vocab_size']} of {config['vocab_size']})")
    return 0


# -- generate and serve: the runtime controller ------------------------------------------------
def add_runtime_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add the `generate` and `serve` subcommands (each sets `func`, returning an exit code)."""
    generate = subparsers.add_parser("generate", help="generate replies with per-domain layer skipping",
                                     description="Route prompts to their domain and generate with its skip set.")
    _add_controller_options(generate)
    source = generate.add_mutually_exclusive_group(required=True)
    source.add_argument("prompt", nargs="?", help="the prompt (one user message)")
    source.add_argument("--prompts", metavar="FILE.jsonl",
                        help="JSONL of {\"prompt\": str | \"turns\": [str], \"domain\": optional}")
    generate.add_argument("--domain", help="domain tag for the prompt (overrides the router)")
    generate.add_argument("--output", metavar="FILE.jsonl", help="with --prompts: write one result per request")
    generate.set_defaults(func=run_generate)

    serve = subparsers.add_parser("serve", help="serve an OpenAI-compatible HTTP API",
                                  description="OpenAI-compatible server applying each domain's skip set.")
    _add_controller_options(serve)
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: localhost only)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-queue", type=int, default=8, help="requests that may wait; more get 503")
    serve.add_argument("--max-tokens-limit", type=int, default=1024, help="largest max_tokens a request may ask")
    serve.add_argument("--max-prompt-tokens", type=int, default=None, help="longest prompt accepted (tokens)")
    serve.add_argument("--api-key", default=None,
                       help="require 'Authorization: Bearer KEY' on /v1/* (default: $SPECSPARSE_API_KEY, else none)")
    serve.add_argument("--insecure", action="store_true", help="allow a non-loopback --host without an API key")
    serve.add_argument("--request-timeout", type=float, default=30.0, metavar="S",
                       help="a request's line, headers and body must arrive within S seconds of connecting "
                            "(default 30; later: 408 and the socket is closed)")
    serve.add_argument("--max-client-connections", type=int, default=None, metavar="N",
                       help="open sockets one client address may hold; more get 503 (default: max(8, max-queue + 2))")
    serve.set_defaults(func=run_serve)


def _add_controller_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-map", required=True, metavar="PATH", help="domain config map (.yaml/.json)")
    parser.add_argument("--model", default="smollm2-135m", help="target model (default: smollm2-135m)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"])
    parser.add_argument("--drafter", default="samd", help="pld, samd, recycling, self_skip, draft_model, eagle or none")
    parser.add_argument("--drafter-path", metavar="DIR", default=None,
                        help="drafter=eagle: the EAGLE checkpoint directory or Hub id (specsparse train-drafter)")
    parser.add_argument("--router", default="map", metavar="map|builtin|none|FILE",
                        help="router: fit on the calibration prompts the config map records (default), on the "
                             "built-in calibration prompts, none, a saved .json router, "
                             "or a .jsonl of {domain, prompt} to fit on")
    parser.add_argument("--router-kind", default="tfidf", choices=["tfidf", "hidden"])
    parser.add_argument("--min-confidence", type=float, default=None,
                        help="router confidence below which the dense target serves (default 0.6)")
    parser.add_argument("--vocab-ids", metavar="FILE.json", help="trimmed draft vocabularies {domain: [ids]}")
    parser.add_argument("--force-map", action="store_true",
                        help="apply a config map made for another model (its recorded identity differs)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--num-draft-tokens", type=int, default=5)
    parser.add_argument("--draft-length", default="fixed", choices=["fixed", "adaptive"],
                        help="fixed: draft --num-draft-tokens every step; adaptive: at most that many, chosen "
                             "per step from the acceptance so far (same output, usually faster)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)


def _check_generation_options(args: argparse.Namespace) -> None:
    """The generation options, before any model loads (GenerationConfig's own checks, named by flag)."""
    try:
        GenerationConfig(max_new_tokens=args.max_new_tokens, num_draft_tokens=args.num_draft_tokens,
                         temperature=args.temperature, seed=args.seed, draft_length=args.draft_length)
    except ValueError as err:
        field, _, rest = str(err).partition(" ")
        raise ValueError(f"--{field.replace('_', '-')} {rest}") from None
    if args.min_confidence is not None and not 0 <= args.min_confidence <= 1:
        raise ValueError(f"--min-confidence must be in [0, 1], got {args.min_confidence}")
    if message := missing_model(args.model):
        raise ValueError(message)


def _controller(args: argparse.Namespace, max_prompt_tokens: int | None = None):
    from specsparse.serving.controller import DEFAULT_MIN_CONFIDENCE, Controller  # noqa: PLC0415 - loads torch

    return Controller.from_files(
        model=args.model, config_map=args.config_map, drafter=args.drafter, dtype=args.dtype,
        router_examples=None if args.router == "none" else args.router, router_kind=args.router_kind,
        min_confidence=DEFAULT_MIN_CONFIDENCE if args.min_confidence is None else args.min_confidence,
        vocab_ids=args.vocab_ids, max_prompt_tokens=max_prompt_tokens, force_map=args.force_map,
        drafter_options=None if args.drafter_path is None else {"path": args.drafter_path},
    )



def _guarded(handler):
    """Turn expected errors into one line on stderr and exit code 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (ValueError, OSError, ModelLoadError) as err:
            return fail(first_line(err))
        except KeyboardInterrupt:
            return 130

    run.__doc__ = handler.__doc__
    return run



def stat_line(result) -> str:
    """One-line summary of a ControllerResult."""
    how = result.routed_by if result.routed_by != "classifier" else f"classifier {result.confidence:.2f}"
    line = (f"[domain={result.domain or 'dense'} ({how}) skip={list(result.skip_layers)} vocab={result.vocab_size} "
            f"accept={result.accept_length:.2f} tokens={result.new_tokens} {result.tokens_per_s:.1f} tok/s "
            f"routing={result.routing_ms:.2f} ms total={result.total_ms:.0f} ms]")
    return line if result.reason is None else f"{line} fallback: {result.reason}"


def summary_table(rows: Sequence[tuple[Any, Any]]) -> str:
    """Per-domain table of (ControllerResult, tagged domain) pairs: requests, share of requests,
    how they were routed, token-weighted accept length and tokens/s."""
    groups: dict[str, list] = {}
    for result, _ in rows:
        groups.setdefault(result.domain or "dense", []).append(result)
    groups["all"] = [result for result, _ in rows]
    header = f"{'domain':<16}{'requests':>9}{'share':>8}{'tag':>6}{'clf':>6}{'fallbk':>7}{'accept':>8}{'tok/s':>9}"
    lines = [header, "-" * len(header)]
    for name, results in groups.items():
        tokens = sum(r.new_tokens for r in results)
        steps = sum(r.generation.target_forwards for r in results)
        seconds = sum(r.generation.wall_time_s for r in results)
        routed = {kind: sum(r.routed_by == kind for r in results) for kind in ("tag", "classifier", "fallback")}
        lines.append(
            f"{name:<16}{len(results):>9}{len(results) / len(rows):>8.0%}{routed['tag']:>6}{routed['classifier']:>6}"
            f"{routed['fallback']:>7}{tokens / max(steps, 1):>8.2f}{tokens / seconds if seconds else 0.0:>9.1f}"
        )
    return "\n".join(lines)


@_guarded
def run_generate(args: argparse.Namespace) -> int:
    """Generate a reply for one prompt, or for every record of --prompts with a summary table."""
    from tqdm import tqdm  # noqa: PLC0415

    _check_generation_options(args)
    if args.prompts and args.domain:
        raise ValueError("--domain applies to a single prompt; put \"domain\" in the --prompts records instead")
    if args.output and not args.prompts:
        raise ValueError("--output writes one line per --prompts record; a single prompt's reply goes to stdout "
                         "(redirect it, or give --prompts FILE.jsonl)")
    if args.output and (Path(args.output).is_dir() or not Path(args.output).parent.is_dir()):
        raise ValueError(f"--output {args.output}: give a file path in an existing folder")
    records = read_prompt_records(args.prompts) if args.prompts else [PromptRecord((args.prompt,), args.domain)]
    controller = _controller(args)
    for record in records:  # fail on an unknown tag before spending time on the others
        if record.domain is not None:
            controller.route("", record.domain)
    options = {"max_new_tokens": args.max_new_tokens, "num_draft_tokens": args.num_draft_tokens,
               "temperature": args.temperature, "seed": args.seed, "draft_length": args.draft_length}
    if not args.prompts:
        result = controller.generate(records[0].turns[0], domain=records[0].domain, **options)
        print(result.text)
        print(stat_line(result), file=sys.stderr)
        return 0
    rows = []
    output = Path(args.output).open("w", encoding="utf-8") if args.output else None
    try:
        for index, record in enumerate(tqdm(records, desc="generate", unit="prompt", file=sys.stderr)):
            messages: list[dict[str, str]] = []
            for turn in record.turns:  # a multi-turn record is one conversation, one request per turn
                messages.append({"role": "user", "content": turn})
                result = controller.generate(list(messages), domain=record.domain, **options)
                messages.append({"role": "assistant", "content": result.text})
                rows.append((result, record.domain))
                if output:
                    output.write(json.dumps({"index": index, "turn": len(messages) // 2 - 1, "text": result.text,
                                             "domain": result.domain, "routed_by": result.routed_by,
                                             "confidence": result.confidence, "reason": result.reason,
                                             "skip_layers": list(result.skip_layers),
                                             "accept_length": result.accept_length, "new_tokens": result.new_tokens,
                                             "tokens_per_s": result.tokens_per_s, "total_ms": result.total_ms}) + "\n")
    finally:
        if output:
            output.close()
    print(summary_table(rows))
    return 0


@_guarded
def run_serve(args: argparse.Namespace) -> int:
    """Serve the OpenAI-compatible API until interrupted."""
    from specsparse.serving.server import check_address, check_bind, make_server  # noqa: PLC0415

    _check_generation_options(args)
    for name, value, low in (("--max-queue", args.max_queue, 0), ("--max-tokens-limit", args.max_tokens_limit, 1),
                             ("--max-prompt-tokens", args.max_prompt_tokens, 1),
                             ("--max-client-connections", args.max_client_connections, 1)):
        if value is not None and value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if not 0 < args.request_timeout < float("inf"):
        raise ValueError(f"--request-timeout must be a number of seconds > 0, got {args.request_timeout}")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    api_key = args.api_key or os.environ.get("SPECSPARSE_API_KEY")
    check_bind(args.host, api_key, args.insecure)  # before the model loads
    check_address(args.host, args.port)
    controller = _controller(args, args.max_prompt_tokens)
    server = make_server(controller, args.host, args.port, args.max_queue, model_name=args.model,
                         insecure=args.insecure, default_max_tokens=args.max_new_tokens,
                         max_tokens_limit=args.max_tokens_limit, num_draft_tokens=args.num_draft_tokens,
                         draft_length=args.draft_length, api_key=api_key, request_timeout_s=args.request_timeout,
                         max_client_connections=args.max_client_connections)
    print(f"specsparse: serving {args.model} on {server.url} (domains: {', '.join(controller.domains)}); "
          "Ctrl-C stops", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


# -- entry point -----------------------------------------------------------------------------------
class OneLineParser(argparse.ArgumentParser):
    """Usage errors (a missing or malformed option) in one line, exit code 2, as every other error."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="specsparse",
        description="Per-domain target-layer skipping and draft-vocabulary trimming for speculative decoding. "
                    "Sweeps: python run.py (Hydra).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command_name", metavar="COMMAND")
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


if __name__ == "__main__":
    sys.exit(main())
