"""What an EAGLE head trains on: never a prompt the job measures (a job's recipe holds out its domain's
calibration and test examples, `train-drafter --held-out` does the same, and a job refuses a head
trained on its own prompts), Hub heads with their own vocabulary refused by the vocabulary search before
anything loads, and features beyond the memory budget streamed from disk to the same head."""

from __future__ import annotations

import json
import weakref

import pytest
import torch
from conftest import NUM_LAYERS, plan_for
from test_eagle import random_head

from specsparse.cli import main
from specsparse.data import get_domain
from specsparse.decoding.models import LoadedModel, tiny_tokenizer
from specsparse.drafters.eagle import data as eagle_data
from specsparse.drafters.eagle.checkpoint import load_eagle_head, official_eagle3_config, save_eagle_head
from specsparse.drafters.eagle.recipe import TrainingRecipe, builtin_training, training_domains
from specsparse.drafters.eagle.training import train_eagle_head
from specsparse.jobs.config import ConfigError
from specsparse.measuring.evaluation import EvaluationSpec, Evaluator
from specsparse.types import Component

pytestmark = pytest.mark.usefixtures("embedded_models_installed")

EAGLE = "specsparse.drafters.eagle.EagleDrafter"
TINY_RECIPE = {"prompts": "builtin", "domains": ["qa"], "prompts_per_set": 6, "max_new_tokens": 4, "epochs": 1}


def qa_ids(limit: int) -> set[str]:
    """The ids a job on qa at domain.limit=limit measures: its calibration and test splits."""
    spec = get_domain("qa", limit=limit)
    return {ex.id for split in ("calibration", "test") for ex in spec.load(split)}


# -- a job's recipe never trains on what the job measures ------------------------------------------
def test_a_head_a_job_trains_never_sees_the_jobs_calibration_or_test_examples(tmp_path):
    """drafter=eagle with drafter.train in a job on qa (domain.limit=10): the job gives the head its
    domain's calibration and test ids, and the head trains on other qa examples only."""
    spec = EvaluationSpec(model="tiny", drafter=Component(EAGLE, {"path": str(tmp_path / "heads"), "train": TINY_RECIPE}),
                          domain=get_domain("qa", limit=10))
    evaluator = Evaluator(spec)
    head = evaluator.drafter_factory(None)().checkpoint
    record = json.loads((head / "training.json").read_text())
    measured = qa_ids(10)
    assert measured == set(evaluator.measured_ids) and len(measured) == 10
    assert record["trained_ids"] and not set(record["trained_ids"]) & measured
    assert record["trained_ids"] == [f"qa-{i:03d}" for i in range(11, 17)]  # the next 6 qa examples
    assert sorted(record["recipe"]["held_out_ids"]) == sorted(measured)
    responses = [json.loads(line) for line in (head / "responses.jsonl").read_text().splitlines()]
    assert {r["id"] for r in responses} == set(record["trained_ids"])
    # The config map records the trained head, which a job on the same split accepts.
    recorded = evaluator.recorded_drafter.options
    plan_for(["model=tiny", "drafter=eagle", f"drafter.path={recorded['path']}", "domain=qa", "domain.limit=10"],
             tmp_path)


def test_jobs_on_domains_outside_the_recipes_sets_share_one_head():
    """Held-out ids are kept only where the recipe's sets have them: a job on math holds out nothing
    from a qa-only recipe (the same head as no job), a job on qa holds out exactly its ids."""
    recipe = TrainingRecipe(domains=("qa",), prompts_per_set=5)
    math_ids = {ex.id for ex in get_domain("math", limit=20).load("all")}
    assert recipe.holding_out(math_ids) == recipe
    held = recipe.holding_out(math_ids | qa_ids(8))
    assert set(held.held_out_ids) == qa_ids(8)
    assert [ex.id for ex in builtin_training(held)["qa"]] == [f"qa-{i:03d}" for i in range(9, 14)]
    assert held.identity() != recipe.identity() and "feature_memory_mb" not in held.identity()
    assert TrainingRecipe(prompts="x.jsonl").holding_out(math_ids).held_out_ids == ()  # a prompt file has no ids


# -- train-drafter --held-out, and a job's refusal --------------------------------------------------
def test_train_drafter_holds_out_a_jobs_splits_and_a_job_refuses_a_head_trained_on_its_prompts(tmp_path):
    out = tmp_path / "head"
    assert main(["train-drafter", "--model", "tiny", "--output", str(out), "--held-out", "qa", "--limit", "10",
                 "--prompts-per-set", "3", "--max-new-tokens", "4", "--epochs", "1"]) == 0
    trained = set(json.loads((out / "training.json").read_text())["trained_ids"])
    assert trained and not trained & qa_ids(10) and {"qa-011", "qa-012", "qa-013"} <= trained
    job = ["model=tiny", "drafter=eagle", f"drafter.path={out}"]
    plan_for([*job, "domain=qa", "domain.limit=10"], tmp_path)  # the split it held out: accepted
    with pytest.raises(ConfigError, match=r"trained on 3 of the 20 qa prompts .*--held-out qa --limit 20"):
        plan_for([*job, "domain=qa", "domain.limit=20"], tmp_path)
    with pytest.raises(ConfigError, match=r"trained on 3 of the 10 translation prompts"):
        plan_for([*job, "domain=translation", "domain.limit=10"], tmp_path)


def test_a_head_without_a_record_of_its_training_prompts_passes(models, tmp_path):
    """Hub checkpoints, and heads trained on a prompt file, have no built-in ids: a job accepts them."""
    for name, record in (("hub", None), ("file", {"trained_ids": None}), ("other", {"trained_ids": ["math-001"]})):
        save_eagle_head(random_head(models[0], "eagle"), tmp_path / name)
        if record is not None:
            (tmp_path / name / "training.json").write_text(json.dumps(record))
        plan_for(["model=tiny", "drafter=eagle", f"drafter.path={tmp_path / name}", "domain=qa", "domain.limit=10"],
                 tmp_path)


@pytest.mark.parametrize("args,problem", [
    (["--held-out", "poetry"], "--held-out poetry"),
    (["--limit", "10"], "--limit 10"),
    (["--held-out", "qa", "--limit", "1"], "--limit 1"),
    (["--held-out", "qa", "--prompts", "{tmp}/prompts.jsonl"], "--held-out"),
    (["--feature-memory-mb", "-1"], "feature memory"),
    (["--prompts-per-set", "0"], "prompts per set"),
])
def test_train_drafter_refuses_bad_split_options_in_one_line(tmp_path, capsys, monkeypatch, args, problem):
    from specsparse.decoding import models as models_module

    monkeypatch.setattr(models_module, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert main(["train-drafter", "--model", "tiny", "--output", str(tmp_path / "head"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("specsparse: error:") and problem in err


# -- Hub EAGLE-3 heads with their own vocabulary ----------------------------------------------------
def hub_snapshot(cache, repo: str, directory) -> None:
    """Lay out `directory`'s files as the Hub cache holds `repo` (refs/main -> a snapshot)."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for file in directory.iterdir():
        (snapshot / file.name).write_bytes(file.read_bytes())
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("0" * 40)


def test_a_hub_eagle3_head_with_its_own_vocabulary_is_refused_by_the_vocabulary_search(models, tmp_path, monkeypatch):
    """An official EAGLE-3 checkpoint by Hub id (config.json: draft_vocab_size below vocab_size) is
    refused by search=tpe_vocab and joint_vocab from the local Hub cache, before anything loads; a
    full-vocabulary one passes."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    for name, trimmed in (("trimmed", True), ("full", False)):
        save_eagle_head(random_head(models[0], "eagle3", trimmed), tmp_path / name)
        (tmp_path / name / "config.json").write_text(json.dumps(official_eagle3_config(tmp_path / name)))
        hub_snapshot(tmp_path / "hub", f"org/eagle3-{name}", tmp_path / name)
    for search in ("tpe_vocab", "joint_vocab"):
        with pytest.raises(ConfigError, match=r"org/eagle3-trimmed was trained with a trimmed vocabulary of its own"):
            plan_for(["model=tiny", f"search={search}", "drafter=eagle", "drafter.path=org/eagle3-trimmed"], tmp_path)
        plan_for(["model=tiny", f"search={search}", "drafter=eagle", "drafter.path=org/eagle3-full"], tmp_path)
    # Not in the cache, offline: nothing to read, the load reports it.
    plan_for(["model=tiny", "search=tpe_vocab", "drafter=eagle", "drafter.path=org/not-cached"], tmp_path)


# -- features beyond the memory budget ---------------------------------------------------------------
def test_features_beyond_the_memory_budget_stream_from_disk_to_the_same_head(models, tmp_path, monkeypatch):
    """A budget smaller than the data writes the features to disk and reads them back a sequence at a
    time (never more than a batch alive at once); the trained head equals the in-memory run's."""
    target = LoadedModel(models[0], tiny_tokenizer(), {"name": "tiny-test"})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"tell {i} things"}) + "\n" for i in range(24)))
    recipe = TrainingRecipe(prompts=str(prompts), max_new_tokens=12, epochs=2, batch_size=4, vocab_size=40)
    in_memory = train_eagle_head(target, tmp_path / "memory", recipe)

    real = eagle_data.FeatureStore.__getitem__
    live: set[int] = set()
    peak = [0]

    def tracked(self, i):
        sequence = real(self, i)
        live.add(id(sequence))
        weakref.finalize(sequence, live.discard, id(sequence))
        peak[0] = max(peak[0], len(live))
        return sequence

    monkeypatch.setattr(eagle_data.FeatureStore, "__getitem__", tracked)
    streamed = train_eagle_head(target, tmp_path / "disk", TrainingRecipe(**{**recipe.__dict__, "feature_memory_mb": 0.01}))
    memory_record = json.loads((in_memory / "training.json").read_text())
    disk_record = json.loads((streamed / "training.json").read_text())
    assert memory_record["features"]["on_disk"] is False
    assert disk_record["features"]["on_disk"] is True and disk_record["features"]["bytes"] > 0.01 * 2**20
    assert 0 < peak[0] <= recipe.batch_size < disk_record["sequences"]
    assert not (streamed / "features").exists()  # removed once trained
    first = load_eagle_head(str(in_memory), models[0].config, NUM_LAYERS).state_dict()
    second = load_eagle_head(str(streamed), models[0].config, NUM_LAYERS).state_dict()
    for name, tensor in first.items():
        assert torch.equal(tensor, second[name]), name
    assert memory_record["history"] == disk_record["history"]  # the same losses and agreement, epoch by epoch


def test_a_feature_store_reads_back_each_sequence_alone(tmp_path, monkeypatch):
    torch.manual_seed(0)
    sequences = [eagle_data.DistillationSequence(torch.randint(0, 99, (n,)), 2, torch.randn(n, 6),
                                                 torch.randint(0, 40, (n - 1, 3)).int(), torch.rand(n - 1, 3))
                 for n in (5, 9, 3)]
    store = eagle_data.FeatureStore(tmp_path / "features")
    for sequence in sequences:
        store.append(sequence)
    read: list[int] = []
    real = eagle_data.np.fromfile
    monkeypatch.setattr(eagle_data.np, "fromfile", lambda *a, count, **k: read.append(count) or real(*a, count=count, **k))
    for i in (2, 0, 1):
        got, want = store[i], sequences[i]
        assert got.prompt_length == want.prompt_length
        for field in ("tokens", "features", "target_ids", "target_probs"):
            assert getattr(got, field).dtype == getattr(want, field).dtype
            assert torch.equal(getattr(got, field), getattr(want, field)), field
    assert max(read) == 9 * 6  # one sequence's features at most
    assert eagle_data.data_bytes([5, 9, 3], 6, 3) == sum(p.stat().st_size for p in (tmp_path / "features").iterdir())


def test_a_set_held_out_whole_is_not_among_the_domains_a_head_trained_on():
    """At domain.limit=null a job holds out its whole set: its head is then out of domain for it
    (the vocabulary table's in_domain), though the recipe names the set."""
    recipe = TrainingRecipe(domains=("qa", "math"))
    every_qa = [ex.id for ex in builtin_training(recipe)["qa"]]
    assert training_domains(recipe) == ["qa", "math"]
    assert training_domains(recipe.holding_out(every_qa)) == ["math"]
    assert training_domains(recipe.holding_out(every_qa[:10])) == ["qa", "math"]
