"""The one reader of prompt files: JSON lines of {"prompt": str} or {"turns": [str, ...]}, each with
an optional "domain". `specsparse generate --prompts` runs them; a router fits on the tagged ones."""

from __future__ import annotations

import os
from dataclasses import dataclass

from specsparse.util import read_jsonl


class PromptFileError(ValueError):
    """A prompt file that cannot be used; the message is one line naming the file and line."""


@dataclass(frozen=True)
class PromptRecord:
    """One line of a prompt file: user turns (one conversation) and an optional domain tag."""

    turns: tuple[str, ...]
    domain: str | None = None

    @property
    def text(self) -> str:
        """The turns as one text (what a router classifies)."""
        return "\n\n".join(self.turns)


def read_prompt_records(path: str | os.PathLike, require_domain: bool = False) -> list[PromptRecord]:
    """Every record of a prompt file; PromptFileError naming the line of a bad one."""
    try:
        lines = list(read_jsonl(path))
    except FileNotFoundError:
        raise PromptFileError(f"{path}: no such prompts file") from None
    except ValueError as err:
        raise PromptFileError(str(err)) from None
    records = []
    for number, record in lines:
        if not isinstance(record, dict):
            raise PromptFileError(f"{path}:{number}: expected a JSON object")
        turns = [record["prompt"]] if "prompt" in record else record.get("turns")
        domain = record.get("domain")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
            raise PromptFileError(f"{path}:{number}: expected \"prompt\": string or \"turns\": [strings]")
        if domain is not None and not isinstance(domain, str) or (require_domain and domain is None):
            raise PromptFileError(f"{path}:{number}: \"domain\" must be a string" + (" (required here)" if require_domain else ""))
        records.append(PromptRecord(tuple(turns), domain))
    if not records:
        raise PromptFileError(f"{path}: no prompts")
    return records
