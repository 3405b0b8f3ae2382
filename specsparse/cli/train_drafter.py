"""`specsparse train-drafter`: train an EAGLE head for a target by self-distillation."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specsparse.cli.common import add_forward_path_option, fail, forward_path_problem, missing_model, set_threads
from specsparse.data import BUILTIN_SETS, load_examples
from specsparse.decoding.models import ModelLoadError
from specsparse.drafters.eagle.recipe import TrainingRecipe
from specsparse.util import first_line


def add_train_drafter_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train-drafter",
        help="train an EAGLE head for a target by self-distillation (drafter=eagle drafter.path=DIR)",
        description="Generates the target's greedy replies to training prompts, then trains a one-layer EAGLE "
                    "head on its features (smooth-L1 + 0.1 x cross-entropy); see specsparse/drafters/eagle/training.py. "
                    "Started again on the same DIR, an interrupted run resumes.",
    )
    defaults = TrainingRecipe()
    p.add_argument("--output", required=True, metavar="DIR", help="checkpoint directory (drafter.path)")
    p.add_argument("--model", default="smollm2-135m", help="target: any model source run.py accepts")
    p.add_argument("--dtype", default="float32", help="the target's dtype (the head trains in float32)")
    p.add_argument("--device", default="cpu")
    add_forward_path_option(p)
    p.add_argument("--prompts", default=defaults.prompts, metavar="builtin|FILE.jsonl",
                   help="builtin: the built-in sets' examples but those --held-out; or a JSONL of {\"prompt\": str} / "
                        "{\"turns\": [str]}")
    p.add_argument("--held-out", action="append", default=[], metavar="DOMAIN",
                   help="a domain a later job measures (repeatable): its calibration and test examples, the first "
                        "--limit of its built-in set whatever the split's fraction and seed, are not trained on. A job "
                        "refuses a head trained on its own prompts")
    p.add_argument("--limit", type=int, default=None,
                   help="the later jobs' domain.limit (default: none, so the whole set of each --held-out domain)")
    p.add_argument("--prompts-per-set", type=int, default=None,
                   help="at most this many training prompts of each built-in set (default: all not held out)")
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
    p.add_argument("--feature-memory-mb", type=float, default=defaults.feature_memory_mb,
                   help="host memory (MB) for the target's features while the head trains; beyond it they are "
                        "written to DIR/features and read back a batch at a time (same head, bounded memory)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    p.set_defaults(func=run_train_drafter)


def run_train_drafter(args: argparse.Namespace) -> int:
    from specsparse.decoding.models import load_model  # noqa: PLC0415
    from specsparse.drafters.eagle.training import train_eagle_head  # noqa: PLC0415

    if (code := set_threads(args.threads)) is not None:
        return code
    if message := missing_model(args.model) or forward_path_problem(args.forward_path, args.device, args.dtype):
        return fail(message)
    if args.prompts != "builtin" and not Path(args.prompts).is_file():
        return fail(f"--prompts {args.prompts}: no such file (give builtin or a .jsonl of prompts)")
    if args.prompts != "builtin" and (args.held_out or args.prompts_per_set is not None):
        return fail("--held-out and --prompts-per-set choose among the built-in sets: leave them out with --prompts FILE")
    if unknown := sorted(set(args.held_out) - set(BUILTIN_SETS)):
        return fail(f"--held-out {unknown[0]}: not a built-in set; give one of {', '.join(BUILTIN_SETS)}")
    if args.limit is not None and (not args.held_out or args.limit < 2):
        return fail(f"--limit {args.limit}: give it (>= 2, as domain.limit) with the --held-out domains it limits")
    output = Path(args.output)
    if output.exists() and not output.is_dir():
        return fail(f"--output {output} is a file: give a folder for the checkpoint (created if missing)")
    if any(parent.exists() and not parent.is_dir() for parent in output.parents):
        return fail(f"--output {output} lies under a file: give a folder for the checkpoint")
    recipe = TrainingRecipe(
        prompts=args.prompts, held_out_ids=held_out_ids(args.held_out, args.limit),
        prompts_per_set=args.prompts_per_set, max_new_tokens=args.max_new_tokens, sampled_replies=args.sampled_replies,
        temperature=args.temperature, epochs=args.epochs,
        learning_rate=args.learning_rate, batch_size=args.batch_size, vocab_size=args.vocab_size,
        vocab_file=args.vocab_file, arch=args.arch, ttt_steps=args.ttt_steps, seed=args.seed,
        feature_memory_mb=args.feature_memory_mb,
    )
    try:
        recipe.check()  # before the model loads; the vocabulary's size is checked once it has
        loaded = load_model(args.model, dtype=args.dtype, device=args.device, forward_path=args.forward_path)
        output = train_eagle_head(loaded, output, recipe)
    except (ModelLoadError, ValueError) as err:
        return fail(first_line(err))
    summary = json.loads((output / "training.json").read_text())
    last = summary["history"][-1]
    print(f"EAGLE head for {args.model}: {output}")
    print(f"  {summary['sequences']} sequences, {summary['tokens']} tokens, draft vocabulary {summary['draft_vocab_size']}, "
          f"{summary['seconds'] / 60:.1f} min")
    print(f"  held-out top-1 agreement with the target: {last['held_out_agreement']:.3f} (epoch {last['epoch']})")
    job = (f" domain={args.held_out[0]}" if args.held_out else "") + (f" domain.limit={args.limit}" if args.limit else "")
    print(f"  use it: python run.py drafter=eagle drafter.path={output}{job}")
    return 0


def held_out_ids(domains: list[str], limit: int | None) -> tuple[str, ...]:
    """The ids a job on each of `domains` (built-in, `domain.limit=limit`) measures: its calibration and
    test splits together are the set's first `limit` examples, whatever the fraction and seed."""
    return tuple(sorted({ex.id for name in domains for ex in load_examples(name, "builtin", limit=limit)}))
