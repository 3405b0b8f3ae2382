"""Task domains (one definition each, specsparse/data/conf/domain/), their prompt sets (built-in and
loaders for public formats) and splits."""

from specsparse.data.domain import BUILTIN_SETS, DOMAINS, SPLITS, Domain, build_messages, get_domain, load_examples
from specsparse.data.examples import Example, format_choice_question, mmlu_prompt
from specsparse.data.sources import SOURCES, SPEC_BENCH_CATEGORIES, records_to_examples
from specsparse.data.split import overlapping_ids, split_examples, split_unit

__all__ = [
    "BUILTIN_SETS",
    "DOMAINS",
    "Domain",
    "Example",
    "SOURCES",
    "SPEC_BENCH_CATEGORIES",
    "SPLITS",
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
