"""`specsparse generate` and `specsparse serve`: the runtime controller, on prompts or behind the
OpenAI-compatible server. Both take the same controller and generation options."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsparse.cli.common import add_forward_path_option, fail, forward_path_problem, missing_model
from specsparse.data.prompts import PromptRecord, read_prompt_records
from specsparse.decoding.models import ModelLoadError
from specsparse.types import GenerationConfig
from specsparse.util import first_line


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
    add_forward_path_option(parser)
    parser.add_argument("--drafter", default=None, help="pld, samd, recycling, self_skip, draft_model, eagle or none "
                        "(default: the drafter the config map records, as the search measured it)")
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
    parser.add_argument("--serve-inconclusive", action="store_true",
                        help="also route picks whose held-out verdict is inconclusive (default: only held picks; "
                             "the rest run the dense target; a pick that did not hold never runs)")
    parser.add_argument("--max-new-tokens", type=int, default=GenerationConfig.max_new_tokens)
    parser.add_argument("--num-draft-tokens", type=int, default=GenerationConfig.num_draft_tokens)
    parser.add_argument("--draft-length", default="fixed", choices=["fixed", "adaptive"],
                        help="fixed: draft --num-draft-tokens every step; adaptive: at most that many, chosen "
                             "per step from the acceptance so far (same output, usually faster)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0,
                        help="sampling seed (with --temperature > 0): any integer in -2**63..2**64-1; a negative one is "
                             "taken modulo 2**64, as torch does (-1 is 2**64-1), not a random seed")


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
    if message := missing_model(args.model) or forward_path_problem(args.forward_path, "cpu", args.dtype):
        raise ValueError(message)


def _controller(args: argparse.Namespace, max_prompt_tokens: int | None = None):
    from specsparse.serving.controller import DEFAULT_MIN_CONFIDENCE, Controller  # noqa: PLC0415 - loads torch

    return Controller.from_files(
        model=args.model, config_map=args.config_map, drafter=args.drafter, dtype=args.dtype,
        forward_path=args.forward_path,
        router_examples=None if args.router == "none" else args.router, router_kind=args.router_kind,
        min_confidence=DEFAULT_MIN_CONFIDENCE if args.min_confidence is None else args.min_confidence,
        vocab_ids=args.vocab_ids, max_prompt_tokens=max_prompt_tokens, force_map=args.force_map,
        drafter_options=None if args.drafter_path is None else {"path": args.drafter_path},
        serve_inconclusive=args.serve_inconclusive,
    )


def print_serving(controller) -> None:
    """What each domain of the map runs, and why (its held-out verdict), on stderr at start-up."""
    for line in controller.serving:
        print(f"specsparse: {line}", file=sys.stderr)


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
    print_serving(controller)
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
    print_serving(controller)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
