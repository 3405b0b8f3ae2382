"""Function calls as BFCL scores them: a reply's calls parsed as Python syntax and matched against the
possible answers by function name and arguments (BFCL's AST match, for the simple, multiple and
parallel categories).

A reply is `func(a=1, b="x")` or a list of calls `[f(a=1), g(b=2)]`, optionally in a code fence.
Ground truth is BFCL's: `[{"func": {"arg": [acceptable values...]}}, ...]`, where an acceptable value
"" marks an argument that may be left out.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from typing import Any

_STRING_NOISE = re.compile(r"[ ,./\-_*^]")


def parse_calls(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """[(function name, {argument: value})] of a reply, or None when it is not a call or list of calls
    with literal keyword arguments."""
    text = text.strip()
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    nodes = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call) or node.args:
            return None
        try:
            arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
        except (ValueError, SyntaxError, TypeError):
            return None
        calls.append((ast.unparse(node.func), arguments))
    return calls or None


def _same_value(value: Any, expected: Any) -> bool:
    if isinstance(expected, str) and isinstance(value, str):
        return _STRING_NOISE.sub("", value).lower() == _STRING_NOISE.sub("", expected).lower()
    if isinstance(expected, bool) or isinstance(value, bool):
        return value is expected
    if isinstance(expected, (int, float)) and isinstance(value, (int, float)):
        return value == expected
    if isinstance(expected, (list, tuple)) and isinstance(value, (list, tuple)):
        return len(value) == len(expected) and all(map(_same_value, value, expected))
    if isinstance(expected, dict) and isinstance(value, dict):
        return value.keys() == expected.keys() and all(_same_value(value[k], expected[k]) for k in expected)
    return False


def call_matches(call: tuple[str, dict[str, Any]], expected: dict[str, dict[str, list[Any]]]) -> bool:
    """Whether one parsed call is the expected one: the same function (dots may be written as
    underscores), no unknown argument, every required one given, each value acceptable."""
    (function, options), = expected.items()
    name, arguments = call
    if name not in (function, function.replace(".", "_")):
        return False
    if set(arguments) - set(options):
        return False
    for argument, acceptable in options.items():
        if argument not in arguments:
            if "" not in acceptable:
                return False
        elif not any(_same_value(arguments[argument], value) for value in acceptable if value != ""):
            return False
    return True


def calls_match(reply: str, ground_truth: str | list[dict[str, Any]]) -> bool:
    """Whether a reply makes exactly the expected calls, in any order (BFCL's parallel categories)."""
    expected = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    calls = parse_calls(reply)
    if calls is None or len(calls) != len(expected):
        return False
    return any(all(map(call_matches, order, expected)) for order in itertools.permutations(calls))
