"""`specsparse generate` and `specsparse serve`: the runtime controller from the command line.

`add_runtime_commands(subparsers)` adds both subcommands to an argparse parser; each sets
`func=handler`, where `handler(args) -> int` is the exit code. Bad input (missing file, bad config
map, unknown domain) prints one line on stderr and exits with 2.

    specsparse generate --config-map maps/qa.yaml "What is the capital of Canada?"
    specsparse generate --config-map maps/all.yaml --prompts prompts.jsonl --output results.jsonl
    specsparse serve --config-map maps/all.yaml --port 8000 --max-queue 8
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsparse.models import ModelLoadError

log = logging.getLogger(__name__)


class InputError(ValueError):
    """Unusable command-line input; the message is one line."""


@dataclass(frozen=True)
class PromptRecord:
    """One line of a --prompts file: user turns (run as one conversation) and an optional domain."""

    turns: tuple[str, ...]
    domain: str | None = None


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
    serve.set_defaults(func=run_serve)


def _add_controller_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-map", required=True, metavar="PATH", help="domain config map (.yaml/.json)")
    parser.add_argument("--model", default="smollm2-135m", help="target model (default: smollm2-135m)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"])
    parser.add_argument("--drafter", default="samd", help="pld, samd, recycling, self_skip, draft_model or none")
    parser.add_argument("--router", default="builtin", metavar="builtin|none|FILE",
                        help="router: fit on the built-in calibration prompts, none, a saved .json router, "
                             "or a .jsonl of {domain, prompt} to fit on")
    parser.add_argument("--router-kind", default="tfidf", choices=["tfidf", "hidden"])
    parser.add_argument("--min-confidence", type=float, default=None,
                        help="router confidence below which the dense target serves (default 0.6)")
    parser.add_argument("--vocab-ids", metavar="FILE.json", help="trimmed draft vocabularies {domain: [ids]}")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--num-draft-tokens", type=int, default=5)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)


def _controller(args: argparse.Namespace, max_prompt_tokens: int | None = None):
    from specsparse.controller import DEFAULT_MIN_CONFIDENCE, Controller  # noqa: PLC0415 - loads torch

    return Controller.from_files(
        model=args.model, config_map=args.config_map, drafter=args.drafter, dtype=args.dtype,
        router_examples=None if args.router == "none" else args.router, router_kind=args.router_kind,
        min_confidence=DEFAULT_MIN_CONFIDENCE if args.min_confidence is None else args.min_confidence,
        vocab_ids=args.vocab_ids, max_prompt_tokens=max_prompt_tokens,
    )


def fail(message: str) -> int:
    """One line on stderr, exit code 2: how every command reports bad input."""
    print(f"specsparse: error: {message}", file=sys.stderr)
    return 2


def _guarded(handler):
    """Turn expected errors into one line on stderr and exit code 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (ValueError, OSError, ModelLoadError) as err:
            return fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
        except KeyboardInterrupt:
            return 130

    run.__doc__ = handler.__doc__
    return run


def read_prompts(path: str | Path) -> list[PromptRecord]:
    """Read a --prompts JSONL file; raises InputError naming the line of a bad record."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such prompts file")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{number}: not valid JSON ({err})") from None
        turns = [record.get("prompt")] if isinstance(record, dict) and "prompt" in record else (
            record.get("turns") if isinstance(record, dict) else None)
        domain = record.get("domain") if isinstance(record, dict) else None
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
            raise InputError(f"{path}:{number}: expected \"prompt\": string or \"turns\": [strings]")
        if domain is not None and not isinstance(domain, str):
            raise InputError(f"{path}:{number}: \"domain\" must be a string")
        records.append(PromptRecord(tuple(turns), domain))
    if not records:
        raise InputError(f"{path}: no prompts")
    return records


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

    if args.prompts and args.domain:
        raise InputError("--domain applies to a single prompt; put \"domain\" in the --prompts records instead")
    records = read_prompts(args.prompts) if args.prompts else [PromptRecord((args.prompt,), args.domain)]
    controller = _controller(args)
    for record in records:  # fail on an unknown tag before spending time on the others
        if record.domain is not None:
            controller.route("", record.domain)
    options = {"max_new_tokens": args.max_new_tokens, "num_draft_tokens": args.num_draft_tokens,
               "temperature": args.temperature, "seed": args.seed}
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
    from specsparse.server import make_server  # noqa: PLC0415

    if args.max_queue < 0:
        raise InputError(f"--max-queue must be >= 0, got {args.max_queue}")
    controller = _controller(args, args.max_prompt_tokens)
    server = make_server(controller, args.host, args.port, args.max_queue, model_name=args.model,
                         default_max_tokens=args.max_new_tokens, max_tokens_limit=args.max_tokens_limit,
                         num_draft_tokens=args.num_draft_tokens)
    print(f"specsparse: serving {args.model} on {server.url} (domains: {', '.join(controller.domains)}); "
          "Ctrl-C stops", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run `generate` or `serve` without the main CLI: python -m specsparse.cli_runtime ..."""
    parser = argparse.ArgumentParser(prog="specsparse")
    add_runtime_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
