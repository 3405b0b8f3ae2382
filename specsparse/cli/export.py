"""`specsparse export`: a trimmed draft vocabulary as an SGLang token map, or a trained EAGLE-3 head
in the official checkpoint layout."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from specsparse.cli.common import fail
from specsparse.util import first_line


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
    from specsparse.drafters.eagle.recipe import read_vocab_file  # noqa: PLC0415

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
    from specsparse.drafters.eagle.checkpoint import official_eagle3_config  # noqa: PLC0415

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
