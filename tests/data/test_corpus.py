"""Corpora of assistant responses for draft-vocabulary trimming: record formats, files, saved
datasets, and the config checks of `vocab_corpus`."""

from __future__ import annotations

import json

import pytest

from specsparse.data.corpus import corpus_domains, load_responses, record_responses
from specsparse.jobs.config import ConfigError, _vocab_corpus


@pytest.mark.parametrize("record,texts", [
    ({"response": "yes"}, ["yes"]),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"},
                   {"role": "assistant", "content": "a2"}]}, ["a1", "a2"]),
    ({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}, ["a"]),
    ({"text": "plain"}, ["plain"]),
    ({"prompt": "only a prompt"}, []),
    (["not", "a", "record"], []),
])
def test_assistant_text_of_each_record_format(record, texts):
    assert record_responses(record) == texts


def test_jsonl_and_saved_dataset_corpora(tmp_path):
    rows = [{"response": "first reply"}, {"messages": [{"role": "assistant", "content": "second reply"}]}]
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_responses(str(jsonl)) == ["first reply", "second reply"]
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    datasets.Dataset.from_list([{"response": "from a dataset"}]).save_to_disk(str(folder))
    assert load_responses(str(folder)) == ["from a dataset"]


def test_a_corpus_without_assistant_text_or_with_bad_lines_names_the_file(tmp_path):
    empty = tmp_path / "prompts.jsonl"
    empty.write_text(json.dumps({"prompt": "q"}) + "\n")
    with pytest.raises(ValueError, match="prompts.jsonl: no assistant text"):
        load_responses(str(empty))
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"response": "ok"}) + "\n{oops\n")
    with pytest.raises(ValueError, match="broken.jsonl:2: not valid JSON"):
        load_responses(str(broken))


def test_vocab_corpus_config_entries(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"response": "r"}) + "\n")
    assert _vocab_corpus(["dense_outputs", "builtin:math", "c.jsonl", "hf:org/set:train"], tmp_path) == (
        "dense_outputs", "builtin:math", str(corpus), "hf:org/set:train")
    assert _vocab_corpus("references", tmp_path) == ("references",)
    for bad, needle in ((["builtin:nope"], "neither"), ([], "give a list"), (["missing.jsonl"], "neither"), ([3], "give a list")):
        with pytest.raises(ConfigError, match=needle):
            _vocab_corpus(bad, tmp_path)


def test_corpus_domains_say_in_or_out_of_domain():
    assert corpus_domains(["dense_outputs"], "qa") == {"qa"}
    assert corpus_domains(["builtin:translation", "builtin:math"], "qa") == {"translation", "math"}
    assert "mmlu" in corpus_domains(["builtin"], "qa")
    assert corpus_domains(["/data/c.jsonl"], "qa") is None
