"""Results-store keys: a measurement is stored under the hash of everything that can change it, and a
later job finds it there only when all of that is the same.

    description = describe(evaluator)       # JSON-able: the store's meta, and the base of every key
    key = store_key(description, candidate, thresholds)

What a measurement depends on: the evaluation spec (model, forward path, drafter and its options, the
domain's definition and split, generation and measure settings, vocabulary corpus), the model's
identity, the split's example ids, the contents of any file an option names (a corpus, a drafter
checkpoint), and the code that measures (`code_version`). The batch size (same results) and the cost
profile (it prices the counts, never changes them) are left out.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specsparse import __version__
from specsparse.measuring.evaluation import Evaluator
from specsparse.types import Candidate
from specsparse.util import checkpoint_sha256, content_hash, file_sha256


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """Hash of the sources that can change a measurement (engine, drafters, data, metrics, ...)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(__version__.encode())
    parts = ["decoding", "drafters", "data", "metrics", "measuring/measure.py", "measuring/replay.py",
             "measuring/vocab.py"]
    for part in parts:
        path = root / part
        for file in sorted(path.rglob("*") if path.is_dir() else [path]):
            if file.suffix in (".py", ".cpp", ".jsonl", ".yaml"):
                digest.update(file.relative_to(root).as_posix().encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def describe(evaluator: Evaluator) -> dict[str, Any]:
    """Everything that affects a measurement by `evaluator`, as JSON-able data (the store meta and key base)."""
    spec = asdict(evaluator.spec)
    spec["measure"].pop("batch_size")
    spec.pop("cost_profile")  # prices, never changes, a measurement (see EvaluationSpec)
    spec["model_identity"] = evaluator.target.identity
    spec["example_ids"] = [ex.id for ex in evaluator.examples]
    spec["vocab_corpus_files"] = {  # a corpus file edited in place measures anew
        entry: file_sha256(entry) for entry in evaluator.spec.vocab_corpus if Path(entry).is_file()
    }
    drafter = evaluator.spec.drafter.options
    spec["drafter_files"] = {  # a drafter checkpoint retrained, or its corpus edited, in place measures anew
        **{option: checkpoint_sha256(value) for option, value in drafter.items()
           if option in ("path", "source") and isinstance(value, str) and Path(value).is_dir()},
        **{entry: file_sha256(entry) for entry in drafter.get("corpus") or () if Path(entry).is_file()},
    }
    spec["code_version"] = code_version()
    return spec


def store_key(description: Mapping[str, Any], candidate: Candidate, thresholds: tuple | None = None) -> str:
    """The key of `candidate` measured as `description` says, with early-rejection `thresholds` (which
    change only an engine-mode measurement: replay measures the whole split whatever they are)."""
    if description["measure"]["mode"] != "engine":
        thresholds = None
    return content_hash({"spec": content_hash(description), "candidate": candidate, "early_reject": thresholds})
