"""Corpora of assistant responses: where a trimmed draft vocabulary's token frequencies come from.

The vocabulary paper counts tokens in the assistant responses of the drafter's training data. A job's
`vocab_corpus` lists its sources, all counted together:

- "dense_outputs": the dense target's own greedy replies to the calibration prompts (the default,
  with "builtin": the tokens the target actually emits);
- "references": the calibration split's reference answers;
- "builtin": the references of every built-in set, except the examples of the job's own test split;
  "builtin:<domain>" those of one built-in set (a corpus of one domain, for in- vs out-of-domain
  comparisons);
- "drafter_responses": the replies the job's drafter was trained on (an EAGLE head `specsparse
  train-drafter` or `drafter.train` made: its `responses.jsonl`), the paper's own corpus;
- a path to a .jsonl file or to a folder saved by `datasets` (`Dataset.save_to_disk`), or
  "hf:<dataset id>[:<split>]" for `datasets.load_dataset` (the Hub, or its local cache offline).
  Records give their text as "response", as assistant turns of "messages" / "conversations"
  ({role, content} or ShareGPT's {from, value}), or as "text".

Nothing from a job's test split enters the first three. A file or dataset is the user's: keep the
test prompts' answers out of it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specsparse.data.domain import BUILTIN_SETS, load_examples
from specsparse.util import read_jsonl

KEYWORDS = ("dense_outputs", "references", "builtin", "drafter_responses")
ASSISTANT_ROLES = ("assistant", "gpt", "model")


def record_responses(record: Mapping[str, Any]) -> list[str]:
    """The assistant text of one corpus record (see the module docstring); [] when it has none."""
    if not isinstance(record, Mapping):
        return []
    if isinstance(record.get("response"), str):
        return [record["response"]]
    for key in ("messages", "conversations"):
        turns = record.get(key)
        if isinstance(turns, list):
            return [
                str(turn.get("content", turn.get("value", "")))
                for turn in turns
                if isinstance(turn, Mapping) and turn.get("role", turn.get("from")) in ASSISTANT_ROLES
            ]
    if isinstance(record.get("text"), str):
        return [record["text"]]
    return []


def load_responses(entry: str) -> list[str]:
    """Assistant texts of a file, saved dataset folder or "hf:" dataset entry (an absolute path)."""
    records: Iterable[Mapping[str, Any]]
    if entry.startswith("hf:"):
        import datasets  # noqa: PLC0415

        name, _, split = entry[3:].partition(":")
        records = datasets.load_dataset(name, split=split or "train")
    elif Path(entry).is_dir():
        import datasets  # noqa: PLC0415

        records = datasets.load_from_disk(entry)
        if isinstance(records, datasets.DatasetDict):
            raise ValueError(f"vocab_corpus {entry}: a dataset with splits {list(records)}; save one split")
    else:
        records = [record for _, record in read_jsonl(entry)]
    texts = [text for record in records for text in record_responses(record)]
    if not texts:
        raise ValueError(
            f"vocab_corpus {entry}: no assistant text found; give records a 'response', 'messages' "
            "(assistant turns), 'conversations' or 'text' field"
        )
    return texts


def builtin_sets(entry: str) -> list[str] | None:
    """The built-in domains a "builtin" / "builtin:<domain>" entry names; None for any other entry."""
    if entry == "builtin":
        return list(BUILTIN_SETS)
    name = entry.removeprefix("builtin:")
    return [name] if name != entry and name in BUILTIN_SETS else None


def is_keyword(entry: str) -> bool:
    return entry in KEYWORDS or builtin_sets(entry) is not None


def corpus_domains(entries: Sequence[str], job_domain: str,
                   drafter_domains: Sequence[str] | None = None) -> set[str] | None:
    """The domains whose texts a corpus holds; None when a file or dataset makes it unknown.
    drafter_domains: the built-in sets the drafter's training replies answer (None: unknown)."""
    domains: set[str] = set()
    for entry in entries:
        if entry in ("dense_outputs", "references"):
            domains.add(job_domain)
        elif builtin_sets(entry) is not None:
            domains.update(builtin_sets(entry))
        elif entry == "drafter_responses" and drafter_domains is not None:
            domains.update(drafter_domains)
        else:
            return None
    return domains


def builtin_responses(entry: str, exclude_ids: Sequence[str] = ()) -> list[str]:
    """The first reference of every example of the built-in sets `entry` names ("builtin" or
    "builtin:<domain>"), except the excluded ids."""
    names = builtin_sets(entry) or []
    excluded = set(exclude_ids)
    return [ex.references[0] for name in names for ex in load_examples(name) if ex.references and ex.id not in excluded]


def corpus_texts(entries: Sequence[str], exclude_ids: Sequence[str] = ()) -> tuple[str, ...]:
    """The texts of corpus entries that need no job ("builtin", "builtin:<domain>", files, saved
    datasets, "hf:" ids); built-in examples in `exclude_ids` stay out."""
    texts: list[str] = []
    for entry in entries:
        if builtin_sets(entry) is not None:
            texts += builtin_responses(entry, exclude_ids)
        elif entry in KEYWORDS:
            raise ValueError(f"corpus entry {entry!r} needs a job's calibration split; use builtin, a file or hf:<id>")
        else:
            texts += load_responses(entry)
    return tuple(texts)


@functools.lru_cache(maxsize=8)
def corpus_token_ids(tokenizer, entries: tuple[str, ...], exclude_ids: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """The token ids of each text of a corpus (`specsparse.data.corpus.corpus_texts`), built-in
    examples in `exclude_ids` left out; once per process and arguments."""
    return tuple(tuple(tokenizer(text, add_special_tokens=False).input_ids)
                 for text in corpus_texts(entries, exclude_ids) if text)
