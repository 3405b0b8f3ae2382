"""Examples of a task domain.

An `Example` holds the user turns exactly as they are sent (instructions included) and its
acceptable answers; its `specsparse.data.domain.Domain` says how turns become chat messages and how
outputs are scored. Chat templates are applied elsewhere, by the tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specsparse.metrics.text import CHOICE_LETTERS


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
