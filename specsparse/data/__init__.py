"""Task domains, their prompt sets (built-in and loaders for public formats) and splits."""

from specsparse.data.examples import (
    DOMAINS,
    Domain,
    Example,
    build_messages,
    format_choice_question,
    get_domain,
    mmlu_prompt,
)
from specsparse.data.sources import (
    SOURCES,
    SPEC_BENCH_CATEGORIES,
    load_examples,
    records_to_examples,
)
from specsparse.data.split import overlapping_ids, split_examples, split_unit

__all__ = [
    "DOMAINS",
    "Domain",
    "Example",
    "SOURCES",
    "SPEC_BENCH_CATEGORIES",
    "build_messages",
    "format_choice_question",
    "get_domain",
    "load_examples",
    "mmlu_prompt",
    "overlapping_ids",
    "records_to_examples",
    "split_examples",
    "split_unit",
]
