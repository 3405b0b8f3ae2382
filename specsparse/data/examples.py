"""Task domains and their examples.

An `Example` holds the user turns exactly as they are sent (instructions included) and its
acceptable answers. A `Domain` says how turns become chat messages, which metric scores the outputs
and how the answer is read from an output. Chat templates are applied elsewhere, by the tokenizer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from specsparse.metrics import get_metric_spec, score
from specsparse.metrics.text import CHOICE_LETTERS, extract_choice_letter, extract_number

ANSWER_FORMATS = ("text", "number", "choice")


@dataclass(frozen=True)
class Example:
    """One prompt of a domain.

    turns: the user messages, in order (2 for MT-bench style conversations, 1 otherwise).
    references: acceptable answers; () when the example has none. MMLU-style examples hold
        (answer letter, text of the correct option); math examples a rationale ending in '#### N'
        or a bare number.
    source: the loader that produced it ("builtin", "spec_bench", "mmlu", "gsm8k", "jsonl", "hf").
    """

    id: str
    domain: str
    turns: tuple[str, ...]
    references: tuple[str, ...] = ()
    source: str = "builtin"

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", tuple(self.turns))
        object.__setattr__(self, "references", tuple(self.references))
        if not self.turns:
            raise ValueError(f"example {self.id!r} has no turns")


@dataclass(frozen=True)
class Domain:
    """A task domain.

    name: domain name ("translation", "qa", ...).
    metric: name of the metric in `specsparse.metrics.METRICS`, or None (no automatic metric).
    input_template: turns a raw input field into the first user turn, for sources whose records
        lack the instruction (GSM8K, jsonl, hf); "{input}" is replaced by the raw text.
    turn_template: applied to every user turn when chat messages are built; "{turn}" is replaced
        by the turn text. The default sends turns unchanged (as Spec-Bench does).
    answer_format: how the answer is read from an output: "text" (stripped output), "number"
        (final number) or "choice" (option letter).
    """

    name: str
    metric: str | None
    input_template: str = "{input}"
    turn_template: str = "{turn}"
    answer_format: str = "text"

    def __post_init__(self) -> None:
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {self.answer_format!r}")
        if "{input}" not in self.input_template:
            raise ValueError(f"input_template must contain '{{input}}', got {self.input_template!r}")
        if "{turn}" not in self.turn_template:
            raise ValueError(f"turn_template must contain '{{turn}}', got {self.turn_template!r}")

    @property
    def headline_metric(self) -> str | None:
        """Name of the value `score` reports as "score" ("rougeL", "f1", ...); None without a metric."""
        return None if self.metric is None else get_metric_spec(self.metric).headline

    def score_outputs(self, outputs: Sequence[str], examples: Sequence[Example]) -> dict[str, float] | None:
        """Extract each output's answer with this domain's rule and score it against the examples'
        references (for a conversation, the last turn's output is the one scored)."""
        if len(outputs) != len(examples):
            raise ValueError(f"{len(outputs)} outputs but {len(examples)} examples")
        return score(self.metric, [self.extract_answer(text) for text in outputs], [ex.references for ex in examples])

    def format_input(self, text: str) -> str:
        """The first user turn for a raw input text."""
        return self.input_template.replace("{input}", text)

    def format_turn(self, turn: str) -> str:
        """The user message content for one turn."""
        return self.turn_template.replace("{turn}", turn)

    def extract_answer(self, output: str) -> str:
        """The answer in a model output, in a form the domain's metric scores.

        number: the final number ('' when there is none); choice: the option letter, or the
        stripped output when no letter is found (the metric then looks for the option text);
        text: the stripped output.
        """
        if self.answer_format == "number":
            return extract_number(output) or ""
        if self.answer_format == "choice":
            return extract_choice_letter(output) or output.strip()
        return output.strip()


DOMAINS: dict[str, Domain] = {
    d.name: d
    for d in (
        Domain("translation", "sacrebleu", input_template="Translate German to English: {input}"),
        Domain("summarization", "rouge", input_template="Summarize: {input}"),
        Domain("qa", "squad"),
        Domain("math", "numeric_match", answer_format="number"),
        Domain("rag", "answer_in_list"),
        Domain("mt_bench", None),
        Domain("mmlu", "choice_accuracy", answer_format="choice"),
    )
}


def get_domain(name: str, **overrides: str | None) -> Domain:
    """The domain registered as `name`, with optional field overrides (e.g. turn_template=...)."""
    try:
        domain = DOMAINS[name]
    except KeyError:
        raise ValueError(f"unknown domain {name!r}; known: {', '.join(DOMAINS)}") from None
    return dataclasses.replace(domain, **overrides) if overrides else domain


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


def format_choice_question(question: str, options: Sequence[str], answer: str | None = None) -> str:
    """One MMLU-style block: the question, 'A. ..' to 'D. ..' and 'Answer:' (+ ' X' for exemplars)."""
    if len(options) != len(CHOICE_LETTERS):
        raise ValueError(f"expected {len(CHOICE_LETTERS)} options, got {len(options)}")
    # No stripping: the text is kept exactly as in the source, as the original MMLU script does.
    lines = [question] + [f"{letter}. {opt}" for letter, opt in zip(CHOICE_LETTERS, options)]
    lines.append("Answer:" if answer is None else f"Answer: {answer}")
    return "\n".join(lines)


def mmlu_prompt(subject: str, exemplars: Sequence[tuple[str, Sequence[str], str]], question: str, options: Sequence[str]) -> str:
    """The standard k-shot MMLU prompt (Hendrycks et al.): a header naming the subject, the
    exemplars (question, options, answer letter) with their answers, then the question, ending in
    'Answer:'."""
    header = f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.\n\n"
    shots = "".join(format_choice_question(q, opts, ans) + "\n\n" for q, opts, ans in exemplars)
    return header + shots + format_choice_question(question, options)
