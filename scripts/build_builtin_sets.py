#!/usr/bin/env python
"""Renumber, reformat and check the built-in example sets in specsparse/data/builtin/.

    python scripts/build_builtin_sets.py            # rewrite the files that are not in normal form
    python scripts/build_builtin_sets.py --check    # exit 1 when a file is not in normal form

The .jsonl files are the data: to add an example, append it as one JSON line (the "id" may be left
out) and run this script. Measurements hash these files, so a file already in normal form is
never rewritten. The normal form of a file:

- its original rows (the first ORIGINAL[domain].rows lines) byte for byte; their SHA-256 is checked and
  the script refuses to run when they changed;
- then every other row as one line of compact JSON (UTF-8, not ASCII-escaped), with the id
  "<domain>-NNN" first, continuing the numbering;
- no two rows with the same first turn (mmlu: question).

tests/data/test_builtin_sets.py checks the properties of each set (sizes, reference formats, exact math
rationales, rag answers quoted from one passage, balanced mmlu letters). mmlu_dev.jsonl is not touched.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import NamedTuple

BUILTIN_DIR = Path(__file__).resolve().parents[1] / "specsparse" / "data" / "builtin"


class Original(NamedTuple):
    rows: int  # number of original lines at the top of the file
    sha256: str  # SHA-256 of those lines (bytes, newlines included)


ORIGINAL = {
    "translation": Original(28, "05ea1366fe3676f81034cf26ecd0ceab34356272c8778a72256a47ceeb39d738"),
    "summarization": Original(26, "42e5f3625442844a4f8544bc1f39066a41772eeee8d543dc247099693ab73daf"),
    "qa": Original(28, "392254a24307cf8b4f67427443972bcd871af7e2d8186f6d2b40f3832b76a778"),
    "math": Original(27, "d5d37479d85072f53837519e0ceb1c725e1f5810a8e0bb6a06cd76e2c6751ae2"),
    "rag": Original(26, "971b86f7a59df9fffaf8ae7f45ae2de9e438727dc379af7b2d03896114d8b28f"),
    "mt_bench": Original(24, "2e372098ec5443515c2db82bf2c793606520482bc7e55ee357a2582c6430c8df"),
    "mmlu": Original(28, "c37de92fdedcb10e14bcce6126123b6863282c38c0daa8989bb14115d3345620"),
}


def _first_turn(row: dict) -> str:
    return row["turns"][0] if "turns" in row else row["question"]


def normal_form(domain: str, content: bytes) -> bytes:
    """`content` of the domain's file in normal form (see the module docstring)."""
    spec = ORIGINAL[domain]
    lines = content.splitlines(keepends=True)
    head = lines[: spec.rows]
    if len(head) != spec.rows or hashlib.sha256(b"".join(head)).hexdigest() != spec.sha256:
        raise SystemExit(f"{domain}.jsonl: the first {spec.rows} (original) lines changed; refusing to rewrite")
    added = [json.loads(line) for line in lines[spec.rows :] if line.strip()]
    rows = [{"id": f"{domain}-{spec.rows + i:03d}"} | {k: v for k, v in row.items() if k != "id"}
            for i, row in enumerate(added, start=1)]
    first_turns = [_first_turn(json.loads(line)) for line in head] + [_first_turn(row) for row in rows]
    if len(set(first_turns)) != len(first_turns):
        raise SystemExit(f"{domain}: duplicate first turns")
    return b"".join(head) + b"".join(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n" for row in rows)


def build(domain: str) -> bytes:
    """The normal form of the domain's shipped file."""
    return normal_form(domain, (BUILTIN_DIR / f"{domain}.jsonl").read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that the files are in normal form")
    args = parser.parse_args(argv)
    stale = []
    for domain in ORIGINAL:
        path = BUILTIN_DIR / f"{domain}.jsonl"
        content = build(domain)
        rows = content.count(b"\n")
        if path.read_bytes() == content:
            print(f"{domain}: up to date ({rows} rows)")
        elif args.check:
            stale.append(domain)
            print(f"{domain}: not in normal form")
        else:
            path.write_bytes(content)
            print(f"{domain}: wrote {rows} rows ({ORIGINAL[domain].rows} original)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
