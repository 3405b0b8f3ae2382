"""A task domain, defined once: specsparse/data/conf/domain/<name>.yaml says where its prompts come from,
how they are split, how turns become chat messages, how the answer is read from an output and which
metric scores it. Hydra's `domain` group selects one of those files (conf/config.yaml puts this
folder on its search path) and any field can be overridden (`domain.limit=20`,
`domain.source=spec_bench domain.path=...`); `DOMAINS` holds the same files as packaged.

    get_domain("qa").load("calibration")                 # the calibration split of the built-in set
    load_examples("rag", "spec_bench", path="…/question.jsonl")
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from specsparse.data.examples import Example
from specsparse.data.sources import SOURCES
from specsparse.data.split import split_examples
from specsparse.metrics import METRICS, get_metric_spec, score
from specsparse.metrics.code import extract_code
from specsparse.metrics.math_answers import final_answer
from specsparse.metrics.text import extract_choice_letter, extract_number

log = logging.getLogger(__name__)

DEFINITIONS = Path(__file__).resolve().parent / "conf" / "domain"
ANSWER_FORMATS = ("text", "number", "choice", "code", "boxed")
SPLITS = ("calibration", "test", "all")  # "all": every example, unsplit (baselines, reports)
# The order `DOMAINS` lists the definitions in (Spec-Bench's, then MMLU): what walks every domain (a
# drafter's training sets, the router's prompts, built-in corpora) walks them in it.
LISTING_ORDER = ("translation", "summarization", "qa", "math", "rag", "mt_bench", "mmlu")


@dataclass(frozen=True)
class Domain:
    """A task domain (the fields of its YAML definition).

    name: domain name ("translation", "qa", ...).
    metric: name of the metric in `specsparse.metrics.METRICS`, or None (no automatic metric).
    answer_format: how the answer is read from an output: "text" (stripped output), "number"
        (final number), "choice" (option letter), "code" (the first fenced code block) or "boxed"
        (the last \\boxed{} answer, else the final number).
    input_template: turns a raw input field into the first user turn, for sources whose records
        lack the instruction (GSM8K, jsonl, hf); "{input}" is replaced by the raw text.
    turn_template: applied to every user turn when chat messages are built; "{turn}" is replaced
        by the turn text. "{turn}" sends turns unchanged (as Spec-Bench does).
    source, path, options: the loader of `specsparse.data.sources.SOURCES`, its file or folder and its
        options; limit: keep the first n examples (before the split).
    calibration_fraction, split_seed, exclude_ids: the calibration / test split (`split_examples`).
    execute_code: allow a metric that runs model-written programs (`code_pass`) to run them on this
        machine; off by default, and scoring such a metric without it is refused.
    """

    name: str
    metric: str | None = None
    answer_format: str = "text"
    input_template: str = "{input}"
    turn_template: str = "{turn}"
    source: str = "builtin"
    path: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None
    calibration_fraction: float = 0.2
    split_seed: int = 0
    exclude_ids: tuple[str, ...] = ()
    execute_code: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "exclude_ids", tuple(self.exclude_ids))
        for name in ("metric", "answer_format", "input_template", "turn_template"):
            value = getattr(self, name)
            if not isinstance(value, str) and (name != "metric" or value is not None):
                raise ValueError(f"{name} must be a string, got {value!r}")
        if self.metric is not None and self.metric not in METRICS:
            raise ValueError(f"metric {self.metric!r} is unknown: use one of {', '.join(METRICS)} or null")
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {self.answer_format!r}")
        if "{input}" not in self.input_template:
            raise ValueError(f"input_template must contain '{{input}}', got {self.input_template!r}")
        if "{turn}" not in self.turn_template:
            raise ValueError(f"turn_template must contain '{{turn}}', got {self.turn_template!r}")
        if not isinstance(self.execute_code, bool):
            raise ValueError(f"execute_code must be true or false, got {self.execute_code!r}")

    def check_code_execution(self) -> None:
        """ValueError unless the metric runs no programs or the domain allows it (`execute_code`)."""
        if self.metric is not None and get_metric_spec(self.metric).runs_code and not self.execute_code:
            raise ValueError(f"the {self.metric} metric runs model-written code on this machine: allow it with "
                             "domain.execute_code=true (or set domain.metric=null)")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Domain:
        """A domain as a job's record holds it (`asdict`), keys of later versions left out. A record of
        an earlier version is read through `specsparse.old_formats` first (`current_reproduce`)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in known})

    # -- prompts ------------------------------------------------------------------------------
    def examples(self) -> list[Example]:
        """Every example of the source, in source order (the first `limit`), none excluded."""
        return load_examples(self, self.source, self.path, self.limit, **self.options)

    def load(self, split: str) -> list[Example]:
        """The examples of `split` ("calibration", "test" or "all"), `exclude_ids` removed."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}: use one of {SPLITS}")
        examples = self.examples()
        if split == "all":
            return [ex for ex in examples if ex.id not in set(self.exclude_ids)]
        calibration, test = split_examples(examples, self.calibration_fraction, self.split_seed, self.exclude_ids)
        return calibration if split == "calibration" else test

    def format_input(self, text: str) -> str:
        """The first user turn for a raw input text."""
        return self.input_template.replace("{input}", text)

    def format_turn(self, turn: str) -> str:
        """The user message content for one turn."""
        return self.turn_template.replace("{turn}", turn)

    # -- answers ------------------------------------------------------------------------------
    @property
    def headline_metric(self) -> str | None:
        """Name of the value `score` reports as "score" ("rougeL", "f1", ...); None without a metric."""
        return None if self.metric is None else get_metric_spec(self.metric).headline

    def extract_answer(self, output: str) -> str:
        """The answer in a model output, in a form the domain's metric scores.

        number: the final number ('' when there is none); choice: the option letter, or the
        stripped output when no letter is found (the metric then looks for the option text);
        code: the first fenced code block, else the output; boxed: the last boxed answer, else the
        final number, else the stripped output; text: the stripped output.
        """
        if self.answer_format == "number":
            return extract_number(output) or ""
        if self.answer_format == "choice":
            return extract_choice_letter(output) or output.strip()
        if self.answer_format == "code":
            return extract_code(output)
        if self.answer_format == "boxed":
            return final_answer(output)
        return output.strip()

    def score_outputs(self, outputs: Sequence[str], examples: Sequence[Example]) -> dict[str, float] | None:
        """Extract each output's answer with this domain's rule and score it against the examples'
        references (for a conversation, the last turn's output is the one scored)."""
        if len(outputs) != len(examples):
            raise ValueError(f"{len(outputs)} outputs but {len(examples)} examples")
        self.check_code_execution()
        return score(self.metric, [self.extract_answer(text) for text in outputs], [ex.references for ex in examples])


def _read_definitions() -> dict[str, Domain]:
    domains = {}
    def listed(file: Path) -> tuple[int, str]:  # LISTING_ORDER first, any other definition after it
        return (LISTING_ORDER.index(file.stem) if file.stem in LISTING_ORDER else len(LISTING_ORDER), file.stem)

    for file in sorted(DEFINITIONS.glob("*.yaml"), key=listed):
        domain = Domain(**yaml.safe_load(file.read_text()))
        if domain.name != file.stem:
            raise ValueError(f"{file} defines domain {domain.name!r}: name it {domain.name}.yaml")
        domains[domain.name] = domain
    return domains


DOMAINS: dict[str, Domain] = _read_definitions()
# The domains whose examples ship with specsparse (specsparse/data/builtin/): what a drafter trains on, the
# router's prompts and the "builtin" corpora walk. The others load from a package, a file or the Hub.
BUILTIN_SETS: tuple[str, ...] = tuple(name for name, domain in DOMAINS.items() if domain.source == "builtin")


def get_domain(name: str, **overrides: Any) -> Domain:
    """The domain defined as `name` (specsparse/data/conf/domain/<name>.yaml), with optional field
    overrides: get_domain("qa", limit=10), get_domain("math", source="gsm8k", path=...)."""
    try:
        domain = DOMAINS[name]
    except KeyError:
        raise ValueError(f"unknown domain {name!r}; known: {', '.join(DOMAINS)}") from None
    return replace(domain, **overrides) if overrides else domain


def load_examples(domain: str | Domain, source: str = "builtin", path: str | None = None, limit: int | None = None,
                  **options: Any) -> list[Example]:
    """Examples of `domain` from `source` ("builtin", "spec_bench", "mmlu", "gsm8k", "jsonl", "hf"),
    in source order; `limit` keeps the first n. Source-specific `options` go to the loader."""
    dom = get_domain(domain) if isinstance(domain, str) else domain
    try:
        loader = SOURCES[source]
    except KeyError:
        raise ValueError(f"unknown source {source!r}; known: {', '.join(SOURCES)}") from None
    examples = loader(dom, path, **options)
    if limit is not None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        examples = examples[:limit]
    ids = [ex.id for ex in examples]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{source} gave duplicate example ids for domain {dom.name!r}")
    log.debug("loaded %d %s examples from %s%s", len(examples), dom.name, source, f" ({path})" if path else "")
    return examples


def build_messages(
    domain: Domain, example: Example, turn_index: int, previous_replies: Sequence[str] = ()
) -> list[dict[str, str]]:
    """Chat messages for turn `turn_index` of `example`, given the assistant replies to the earlier
    turns: [user_0, assistant_0, ..., user_i], each {"role": ..., "content": ...}."""
    if not 0 <= turn_index < len(example.turns):
        raise ValueError(f"turn_index {turn_index} out of range for {example.id!r} ({len(example.turns)} turns)")
    if len(previous_replies) != turn_index:
        raise ValueError(f"turn {turn_index} needs {turn_index} previous replies, got {len(previous_replies)}")
    messages: list[dict[str, str]] = []
    for i in range(turn_index + 1):
        messages.append({"role": "user", "content": domain.format_turn(example.turns[i])})
        if i < turn_index:
            messages.append({"role": "assistant", "content": previous_replies[i]})
    return messages
