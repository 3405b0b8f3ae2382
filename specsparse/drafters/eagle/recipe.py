"""What decides a trained EAGLE head (`TrainingRecipe`), checked before any work: a job's
`drafter.train` options and `specsparse train-drafter`'s flags both become one (training: training.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from specsparse.data import BUILTIN_SETS, Example, load_examples
from specsparse.types import GenerationConfig


@dataclass(frozen=True)
class TrainingRecipe:
    """Everything that decides the trained head (a resumed run must match it), and one thing that does
    not: `feature_memory_mb`, the host memory the target's features and distributions may take while
    the head trains (beyond it they are written to disk beside the head and read back a batch at a time;
    the trained head is the same)."""

    prompts: str = "builtin"  # builtin (the built-in sets' examples) or a JSONL of prompts
    domains: tuple[str, ...] | None = None  # builtin: these sets only (None: all; the head is in domain there)
    # builtin: example ids never trained on: a job's own domain's calibration and test ids (a job gives
    # them, `EagleDrafter.from_target`; `train-drafter --held-out`). Only ids of `domains` are kept here.
    held_out_ids: tuple[str, ...] = ()
    prompts_per_set: int | None = None  # builtin: at most this many prompts of each set, the first not held out
    max_new_tokens: int = 128  # length of each training reply (its own setting: it keys the trained heads)
    sampled_replies: int = 0  # more replies per prompt, sampled (HF generate) at `temperature`: more, varied data
    temperature: float = 0.8
    epochs: int = 10
    learning_rate: float = 1e-3
    batch_size: int = 8  # sequences per optimiser step
    max_length: int = 512  # tokens per training sequence (longer ones are cut)
    vocab_size: int | None = None  # trimmed draft vocabulary: the k most frequent tokens of the data
    vocab_file: str | None = None  # or the ids in a JSON list (e.g. a TPE search's pick)
    feature_noise: float = 0.2
    token_loss_weight: float = 0.1  # EAGLE-1's weight of the cross-entropy against the feature loss
    target_top_k: int = 32  # the target distribution's top-k the cross-entropy uses (EAGLE: all of it)
    prompt_loss_weight: float = 0.0  # EAGLE trains on the assistant's replies only
    arch: str = "eagle"  # eagle: the EAGLE-1 layout; eagle3: EAGLE-3 (fused features, own head, training-time test)
    ttt_steps: int = 3  # eagle3: steps of training-time test, the head fed its own outputs (EAGLE-3: 7)
    seed: int = 0
    # Host memory for the target's features and distributions (MB): more data than this waits on disk,
    # beside the head, and is read a batch at a time (`data.py`). Same head either way: not in its key.
    feature_memory_mb: float = 2048

    def identity(self) -> dict:
        """What decides the trained head: every field but `feature_memory_mb` (where the data waits)."""
        return {key: value for key, value in asdict(self).items() if key != "feature_memory_mb"}

    def holding_out(self, ids: Iterable[str]) -> TrainingRecipe:
        """This recipe with `ids` held out of its training prompts (those of its built-in sets: a job on
        another domain holds out nothing here, and shares its head)."""
        if self.prompts != "builtin":
            return self
        known = {ex.id for name in self.domains or BUILTIN_SETS for ex in load_examples(name, "builtin")}
        return replace(self, held_out_ids=tuple(sorted(set(ids) & known)))

    def check(self) -> None:
        GenerationConfig(max_new_tokens=self.max_new_tokens)  # the one max_new_tokens check
        if self.epochs < 1 or self.batch_size < 1 or self.max_length < 8:
            raise ValueError("epochs and batch size must be >= 1 and max length >= 8")
        if self.target_top_k < 1:
            raise ValueError(f"target top-k must be >= 1, got {self.target_top_k}")
        if self.arch not in ("eagle", "eagle3"):
            raise ValueError(f"arch {self.arch!r}: use eagle (EAGLE-1 layout) or eagle3")
        if not isinstance(self.ttt_steps, int) or self.ttt_steps < 1:
            raise ValueError(f"ttt steps must be an integer >= 1, got {self.ttt_steps!r}")
        if self.sampled_replies < 0 or (self.sampled_replies and not self.temperature > 0):
            raise ValueError("sampled replies must be >= 0, with a positive temperature")
        if not self.learning_rate > 0:
            raise ValueError(f"learning rate must be positive, got {self.learning_rate}")
        if self.vocab_size is not None and self.vocab_file is not None:
            raise ValueError("give --vocab-size or --vocab-file, not both")
        if self.vocab_size is not None and self.vocab_size < 2:
            raise ValueError(f"--vocab-size {self.vocab_size}: keep at least 2 tokens")
        if self.prompts_per_set is not None and self.prompts_per_set < 1:
            raise ValueError(f"prompts per set must be >= 1 (or None: all), got {self.prompts_per_set}")
        if not all(isinstance(i, str) for i in self.held_out_ids):
            raise ValueError("held-out ids must be example ids (strings)")
        if self.prompts != "builtin" and (self.held_out_ids or self.prompts_per_set is not None):
            raise ValueError("held-out ids and prompts per set choose among the built-in sets: use prompts=builtin")
        if not (math.isfinite(self.temperature) and math.isfinite(self.learning_rate)):
            raise ValueError("temperature and learning rate must be finite numbers")
        if not (isinstance(self.feature_memory_mb, (int, float)) and 0 <= self.feature_memory_mb < math.inf):
            raise ValueError(f"feature memory must be a number of MB >= 0, got {self.feature_memory_mb!r}")
        if self.vocab_file is not None:
            read_vocab_file(self.vocab_file)
        if self.prompts != "builtin" and not Path(self.prompts).is_file():
            raise ValueError(f"prompts {self.prompts}: no such file (give builtin or a .jsonl of prompts)")
        unknown = sorted(set(self.domains or ()) - set(BUILTIN_SETS))
        if unknown or (self.domains is not None and not self.domains):
            raise ValueError(f"domains {unknown or '[]'}: give built-in sets among {', '.join(BUILTIN_SETS)} (or null for all)")

    def check_vocabulary(self, vocab_size: int) -> None:
        """The draft vocabulary against the target's, once it is known (before any reply is generated)."""
        if self.vocab_size is not None and self.vocab_size > vocab_size:
            raise ValueError(f"--vocab-size {self.vocab_size} is larger than the target's vocabulary ({vocab_size}); "
                             f"give at most {vocab_size}")
        if self.vocab_file is not None and max(read_vocab_file(self.vocab_file)) >= vocab_size:
            raise ValueError(f"--vocab-file {self.vocab_file}: token ids must be within 0..{vocab_size - 1} "
                             "(a vocabulary of another tokenizer?)")


def read_vocab_file(path: str | Path) -> list[int]:
    """The ascending token ids of a JSON list (a trimmed draft vocabulary), or one ValueError naming the file."""
    try:
        ids = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"--vocab-file {path}: not a readable JSON list of token ids ({err})") from None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                      for i in ids):
        raise ValueError(f"--vocab-file {path}: expected a non-empty JSON list of token ids (integers >= 0)")
    return sorted(set(ids))


def builtin_training(recipe: TrainingRecipe) -> dict[str, list[Example]]:
    """Per built-in set of the recipe, the examples it trains on: all but the held-out ids (at most
    `prompts_per_set`, the first ones)."""
    held_out = set(recipe.held_out_ids)
    return {name: [ex for ex in load_examples(name, "builtin") if ex.id not in held_out][: recipe.prompts_per_set]
            for name in recipe.domains or BUILTIN_SETS}


def recipe_from_options(options: dict) -> TrainingRecipe:
    """A `TrainingRecipe` from config options (`drafter.train`), or one ValueError naming the option."""
    if not isinstance(options, dict):
        raise ValueError(f"drafter.train={options!r}: give TrainingRecipe fields, e.g. {{epochs: 4}}")
    fields = set(TrainingRecipe.__dataclass_fields__) - {"held_out_ids"}  # a job gives its own: exclude_ids
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ValueError(f"drafter.train has no option(s) {unknown} (accepted: {', '.join(sorted(fields))})")
    domains = options.get("domains")
    recipe = TrainingRecipe(**{**options, "domains": None if domains is None else tuple(domains)})
    recipe.check()
    return recipe


def training_domains(recipe: TrainingRecipe) -> list[str] | None:
    """The built-in sets a head's training replies come from: those with an example left once the
    held-out ids are out (None: a prompt file's, unknown)."""
    if recipe.prompts != "builtin":
        return None
    return [name for name, examples in builtin_training(recipe).items() if examples]
