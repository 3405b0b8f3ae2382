"""Runtime controller: routing rules, validation against the model, lossless output, router, CLI."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specsparse.config_map import (
    ConfigMap,
    DomainConfig,
    OperatingPoint,
    load_config_map,
    merge_config_maps,
    serving_plan,
    write_config_map,
)
from specsparse.decoding.generation import generate_text
from specsparse.drafters import DRAFTERS, PromptLookupDrafter, SuffixAutomatonDrafter
from specsparse.serving.controller import (
    Controller,
    ControllerError,
    PromptTooLongError,
    UnknownDomainError,
    drafter_factory,
)
from specsparse.serving.router import HiddenStateRouter, TfidfRouter, builtin_prompts, load_router
from specsparse.types import Component, GenerationConfig

TRANSLATION = "Translate German to English: Der Hund schläft im Garten unter dem alten Baum."
MATH = "A baker sells 12 muffins per tray and bakes 7 trays. How many muffins does she bake in total?"


def domain_config(skip: tuple[int, ...], vocab_size: int | None = None) -> DomainConfig:
    dense = OperatingPoint((), 2.0, None, 0.01)
    return DomainConfig(skip, 1.8, None, len(skip) / 4, 0.008, 1 - len(skip) / 4, vocab_size, dense)


def make_map(num_layers: int = 4, **domains: DomainConfig) -> ConfigMap:
    domains = domains or {"translation": domain_config((1,)), "math": domain_config((2, 3))}
    return ConfigMap(model="tiny", num_layers=num_layers, domains=domains, drafter=Component(DRAFTERS["samd"]))


@pytest.fixture(scope="module")
def router():
    return TfidfRouter().fit(builtin_prompts("calibration"))


@pytest.fixture(scope="module")
def map_file(tmp_path_factory):
    yaml_path, _ = write_config_map(tmp_path_factory.mktemp("maps") / "tiny_map", make_map())
    return yaml_path


@pytest.fixture(scope="module")
def controller(tiny, router, map_file):
    return Controller(tiny, load_config_map(map_file), drafter_factory("samd"), router)


# -- routing ---------------------------------------------------------------------------------------
def test_tag_wins_over_classifier(controller):
    route = controller.route(TRANSLATION, domain="math")
    assert (route.domain, route.routed_by, route.confidence) == ("math", "tag", 1.0)
    result = controller.generate(TRANSLATION, domain="math", max_new_tokens=4)
    assert result.domain == "math" and result.skip_layers == (2, 3) and result.routed_by == "tag"


def test_classifier_routes_clearly_different_domains(controller):
    for text, domain in ((TRANSLATION, "translation"), (MATH, "math")):
        route = controller.route(text)
        assert (route.domain, route.routed_by) == (domain, "classifier")
        assert route.confidence >= controller.min_confidence


def test_router_accuracy_on_builtin_test_split(router):
    # Measured: 85% over all 7 domains; translation, summarization, rag and mmlu are >= 95% each.
    test = builtin_prompts("test")
    hits = {d: sum(router.predict(t)[0] == d for t in texts) / len(texts) for d, texts in test.items()}
    overall = sum(hits[d] * len(test[d]) for d in test) / sum(len(t) for t in test.values())
    assert overall >= 0.75, hits
    assert all(hits[d] >= 0.9 for d in ("translation", "summarization", "rag", "mmlu")), hits


def test_low_confidence_and_unmapped_domain_fall_back_to_dense(tiny, router, map_file):
    strict = Controller(tiny, load_config_map(map_file), drafter_factory("samd"), router, min_confidence=0.999)
    result = strict.generate("Hello there.", max_new_tokens=4)
    assert (result.domain, result.routed_by, result.skip_layers) == (None, "fallback", ())
    assert "below" in result.reason
    # A confident prediction of a domain the map lacks (mmlu) also runs dense.
    mmlu_prompt = builtin_prompts("test", domains=["mmlu"])["mmlu"][0]
    route = Controller(tiny, load_config_map(map_file), drafter_factory("samd"), router).route(mmlu_prompt)
    assert (route.domain, route.routed_by, route.predicted) == (None, "fallback", "mmlu")


def test_unknown_tag_is_an_error_and_known_unmapped_tag_runs_dense(controller):
    with pytest.raises(UnknownDomainError, match="unknown domain 'nope'"):
        controller.generate(TRANSLATION, domain="nope")
    route = controller.route(TRANSLATION, domain="qa")  # the router knows qa; the map has no entry
    assert (route.domain, route.routed_by) == (None, "fallback") and "no entry" in route.reason


def test_no_router_means_tags_or_dense(tiny, map_file):
    bare = Controller(tiny, load_config_map(map_file), drafter_factory("pld"), router=None)
    assert bare.route(TRANSLATION).routed_by == "fallback"
    assert bare.route(TRANSLATION, "translation").domain == "translation"


# -- validation ------------------------------------------------------------------------------------
def test_out_of_range_layer_is_rejected(tiny, router):
    cmap = make_map(translation=domain_config((1, 7)))
    with pytest.raises(ControllerError, match=r"'translation'.*\[7\] out of range"):
        Controller(tiny, cmap, drafter_factory("samd"), router)


def test_wrong_num_layers_is_rejected(tiny, tmp_path):
    with pytest.raises(ControllerError, match="30-layer model .* has 4 layers"):
        Controller(tiny, make_map(num_layers=30), drafter_factory("samd"))
    path, _ = write_config_map(tmp_path / "big", make_map(num_layers=30))
    with pytest.raises(ControllerError, match="30-layer"):
        Controller.from_files(model="tiny", config_map=path, router_examples=None)


def test_vocabulary_ids_are_validated(tiny):
    cmap = make_map(math=domain_config((2,), vocab_size=3))
    self_skip = drafter_factory("self_skip", skip_layers=[3])
    with pytest.raises(ControllerError, match="outside"):
        Controller(tiny, cmap, self_skip, vocab_ids={"math": [1, 2, 9999]})
    with pytest.raises(ControllerError, match="draft_vocab_size=3"):
        Controller(tiny, cmap, self_skip, vocab_ids={"math": [1, 2]})
    with pytest.raises(ControllerError, match="drafter cannot be built"):
        Controller(tiny, cmap, drafter_factory("samd"), vocab_ids={"math": [1, 2, 3]})


def test_prompt_too_long(tiny, map_file):
    limited = Controller(tiny, load_config_map(map_file), drafter_factory("samd"), max_prompt_tokens=20)
    with pytest.raises(PromptTooLongError, match="limit is 20"):
        limited.generate(TRANSLATION, max_new_tokens=4)
    with pytest.raises(PromptTooLongError, match="context"):
        limited.encode("x", max_new_tokens=10_000)


# -- the drafter the search measured ---------------------------------------------------------------
def test_serving_builds_the_drafter_a_job_measured(tmp_path):
    """A job's config map records its drafter's class and options; serving builds exactly that drafter."""
    from specsparse.data import get_domain
    from specsparse.jobs.job import run_job
    from specsparse.measuring.evaluation import EvaluationSpec
    from specsparse.study.runners.local import LocalRunner
    from specsparse.study.store import ResultsStore

    pld = Component(DRAFTERS["pld"], {"max_ngram_size": 2, "min_ngram_size": 2})  # not its defaults
    spec = EvaluationSpec(model="tiny", drafter=pld, domain=get_domain("translation", limit=6),
                          generation=GenerationConfig(max_new_tokens=8, num_draft_tokens=3))
    search = Component("specsparse.search.bfs.BFSSearch")
    with ResultsStore(tmp_path / "store.sqlite") as store:
        run_job(spec, search, LocalRunner(progress=False), store, tmp_path / "job", max_measurements=2,
                evaluate_test=False, progress=False)
    controller = Controller.from_files(model="tiny", config_map=tmp_path / "job" / "config_map.yaml",
                                       router_examples=None)
    assert set(controller._drafters) == {None, "translation"}
    for drafter in controller._drafters.values():
        assert isinstance(drafter, PromptLookupDrafter) and (drafter.max_ngram_size, drafter.min_ngram_size) == (2, 2)


def test_a_merged_map_serves_each_domain_the_drafter_its_job_measured(tiny, tmp_path):
    """Jobs with drafters of their own (an EAGLE head per domain) merge into one map that keeps each
    domain's drafter, through the file, and serving builds it for that domain."""
    pld = Component(DRAFTERS["pld"], {"max_ngram_size": 2, "min_ngram_size": 2})
    first = dataclasses.replace(make_map(translation=domain_config((1,))), drafter=Component(DRAFTERS["samd"]))
    second = dataclasses.replace(make_map(math=domain_config((2,))), drafter=pld)
    merged = merge_config_maps([first, second])
    assert merged.drafter == Component(DRAFTERS["samd"])
    assert merged.domains["translation"].drafter is None and merged.domains["math"].drafter == pld
    path, _ = write_config_map(tmp_path / "merged", merged)
    assert load_config_map(path) == merged
    controller = Controller.from_files(model="tiny", config_map=path, router_examples=None)
    assert isinstance(controller._drafters["math"], PromptLookupDrafter)
    assert controller._drafters["math"].max_ngram_size == 2
    assert isinstance(controller._drafters["translation"], SuffixAutomatonDrafter)
    assert isinstance(controller._drafters[None], SuffixAutomatonDrafter)
    everywhere = Controller.from_files(model="tiny", config_map=path, router_examples=None, drafter="samd")
    assert all(isinstance(d, SuffixAutomatonDrafter) for d in everywhere._drafters.values())  # asked: one drafter


def test_a_map_naming_its_drafter_only_serves_its_defaults_and_says_so(tmp_path, caplog):
    path, _ = write_config_map(tmp_path / "earlier", dataclasses.replace(make_map(), drafter="pld"))
    with caplog.at_level(logging.WARNING, logger="specsparse.serving.controller"):
        controller = Controller.from_files(model="tiny", config_map=path, router_examples=None)
    drafter = controller._drafters["math"]
    assert isinstance(drafter, PromptLookupDrafter) and drafter.max_ngram_size == PromptLookupDrafter().max_ngram_size
    assert sum("names its drafter only" in r.getMessage() for r in caplog.records) == 1
    named = Controller.from_files(model="tiny", config_map=path, router_examples=None, drafter="samd")
    assert isinstance(named._drafters["math"], SuffixAutomatonDrafter)  # a named drafter overrides the map's


def test_a_recorded_option_the_drafter_does_not_take_is_a_controller_error(tmp_path):
    """A map from another version may record an option this drafter does not take: one clear error."""
    unknown = Component(DRAFTERS["pld"], {"window": 3})
    path, _ = write_config_map(tmp_path / "other", dataclasses.replace(make_map(), drafter=unknown))
    with pytest.raises(ControllerError, match="drafter cannot be built: .*window"):
        Controller.from_files(model="tiny", config_map=path, router_examples=None)


# -- lossless routing ------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt,domain,skip", [(MATH, "math", (2, 3)), ("Hello there.", None, ())])
def test_output_equals_generate_text_with_the_same_skip_set(tiny, router, map_file, prompt, domain, skip):
    controller = Controller(tiny, load_config_map(map_file), drafter_factory("samd"), router, min_confidence=0.999)
    result = controller.generate(prompt, domain=domain, max_new_tokens=24)
    assert result.skip_layers == skip
    config = GenerationConfig(max_new_tokens=24, num_draft_tokens=5)
    text, reference = generate_text(tiny, prompt, SuffixAutomatonDrafter.from_target(tiny), config, skip_layers=skip)
    assert result.generation.new_token_ids == reference.new_token_ids
    assert result.text == text and result.new_tokens == reference.new_tokens
    ended = reference.new_token_ids[-1] in tiny.eos_token_ids
    assert result.finish_reason == ("stop" if ended else "length") and result.total_ms >= result.routing_ms >= 0


def test_switching_domains_and_trimmed_vocabulary(tiny):
    cmap = make_map(translation=domain_config((1,)), math=domain_config((2,), vocab_size=200))
    ids = list(range(200))
    controller = Controller(tiny, cmap, drafter_factory("self_skip", skip_layers=[3]), vocab_ids={"math": ids})
    config = GenerationConfig(max_new_tokens=12)
    for domain, skip, vocab in (("math", (2,), 200), ("translation", (1,), tiny.model.config.vocab_size),
                                ("math", (2,), 200)):
        result = controller.generate(MATH, domain=domain, max_new_tokens=12)
        text, _ = generate_text(tiny, MATH, None, config, skip_layers=skip)
        assert (result.skip_layers, result.vocab_size, result.text) == (skip, vocab, text)


def test_messages_prompt_routes_on_user_turns(controller):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TRANSLATION}]
    assert controller.route(messages).domain == "translation"


# -- router ----------------------------------------------------------------------------------------
def test_router_save_load_round_trip(router, tmp_path, tiny):
    loaded = load_router(router.save(tmp_path / "router.json"))
    for text in (TRANSLATION, MATH, "hello"):
        assert loaded.predict(text)[0] == router.predict(text)[0]
        assert loaded.predict(text)[1] == pytest.approx(router.predict(text)[1], abs=1e-4)
    texts = {"translation": [TRANSLATION, "Translate German to English: Guten Tag."], "math": [MATH, "What is 7 * 8?"]}
    hidden = HiddenStateRouter(tiny).fit(texts)
    again = load_router(hidden.save(tmp_path / "hidden.json"), tiny)
    assert again.predict(MATH) == pytest.approx(hidden.predict(MATH), abs=1e-4)
    assert hidden.predict(TRANSLATION)[0] == "translation"


def test_router_errors(tmp_path):
    from specsparse.serving.router import RouterError

    with pytest.raises(RouterError, match="at least two domains"):
        TfidfRouter().fit({"qa": ["a question"]})
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(RouterError, match="not a saved router"):
        load_router(tmp_path / "bad.json")
    with pytest.raises(RouterError, match="needs the target"):
        load_router(_hidden_router_file(tmp_path))


def _hidden_router_file(tmp_path):
    path = tmp_path / "hidden.json"
    path.write_text(json.dumps({"kind": "hidden", "temperature": 0.05, "domains": ["a", "b"], "centroids": [[1], [0]]}))
    return path


# -- CLI -------------------------------------------------------------------------------------------
def test_cli_generate_single_prompt_and_errors(map_file, capsys, tmp_path):
    from specsparse.cli import main

    args = ["generate", "--config-map", str(map_file), "--model", "tiny", "--max-new-tokens", "6"]
    assert main([*args, "--domain", "math", MATH]) == 0
    out, err = capsys.readouterr()
    assert "domain=math (tag) skip=[2, 3]" in err and "tokens=" in err
    assert main([*args, "--domain", "nope", MATH]) == 2
    assert main(["generate", "--config-map", str(tmp_path / "missing.yaml"), "--model", "tiny", "x"]) == 2
    assert main(["serve", "--config-map", str(map_file), "--model", "tiny", "--drafter", "nope"]) == 2
    (tmp_path / "broken.yaml").write_text("model: tiny\nnum_layers: 4\n")
    assert main(["generate", "--config-map", str(tmp_path / "broken.yaml"), "--model", "tiny", "x"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("specsparse: error:")]
    assert len(lines) == 4 and "Traceback" not in err and "unknown domain 'nope'" in lines[0]


@pytest.mark.parametrize("option,needle", [
    (["--num-draft-tokens", "-1"], "--num-draft-tokens"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--port", "99999"], "--port"),
    (["--max-queue", "-1"], "--max-queue"),
    (["--temperature", "-0.5"], "--temperature"),
    (["--host", "0.0.0.0", "--port", "0"], "API key"),
])
def test_cli_serve_checks_every_option_before_serving(map_file, capsys, option, needle):
    from specsparse.cli import main

    assert main(["serve", "--config-map", str(map_file), "--model", "tiny", *option]) == 2
    err = capsys.readouterr().err
    assert err.count("specsparse: error:") == 1 and needle in err and "Traceback" not in err


def test_cli_generate_prompts_file_summary(map_file, capsys, tmp_path):
    from specsparse.cli import main

    prompts = tmp_path / "prompts.jsonl"
    records = [{"prompt": TRANSLATION}, {"turns": [MATH, "Now double it."], "domain": "math"},
               {"prompt": "hi", "domain": "qa"}]
    prompts.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out_file = tmp_path / "out.jsonl"
    rc = main(["generate", "--config-map", str(map_file), "--model", "tiny", "--max-new-tokens", "4",
               "--prompts", str(prompts), "--output", str(out_file)])
    assert rc == 0
    table = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in table.splitlines()[2:]}
    assert rows["math"][1] == "2" and rows["translation"][1] == "1" and rows["dense"][1] == "1"
    assert rows["all"][1] == "4"
    assert len(out_file.read_text().splitlines()) == 4
    prompts.write_text('{"prompt": 3}\n')
    assert main(["generate", "--config-map", str(map_file), "--model", "tiny", "--prompts", str(prompts)]) == 2
    assert "prompts.jsonl:1" in capsys.readouterr().err


def test_a_map_made_for_another_model_is_refused_unless_forced(tiny):
    other = {"name": "tiny", "num_layers": 4, "hidden_size": 64, "seed": 99}  # same depth, other weights
    cmap = dataclasses.replace(make_map(translation=domain_config((1,))), model_identity=other)
    with pytest.raises(ControllerError, match="another model.*seed"):
        Controller(tiny, cmap, drafter_factory("pld"))
    Controller(tiny, cmap, drafter_factory("pld"), force_map=True)
    own = dataclasses.replace(cmap, model_identity={**tiny.identity, "dtype": "bfloat16"})  # dtype aside
    Controller(tiny, own, drafter_factory("pld"))


def test_cli_generate_with_an_eagle_head(map_file, capsys, tmp_path):
    from specsparse.cli import main
    from specsparse.decoding.models import tiny_model
    from specsparse.drafters.eagle.checkpoint import save_eagle_head
    from specsparse.drafters.eagle.head import EagleHead, head_config

    save_eagle_head(EagleHead(head_config(tiny_model().model.config)), tmp_path / "eagle")
    args = ["generate", "--config-map", str(map_file), "--model", "tiny", "--max-new-tokens", "6", "--domain", "math"]
    assert main([*args, "--drafter", "eagle", "--drafter-path", str(tmp_path / "eagle"), MATH]) == 0
    assert main([*args, "--drafter", "none", MATH]) == 0
    eagle_out, plain_out = capsys.readouterr().out.strip().splitlines()[-2:]
    assert eagle_out == plain_out  # lossless
    assert main([*args, "--drafter", "eagle", "--drafter-path", str(tmp_path / "missing"), MATH]) == 2
    assert main([*args, "--drafter", "eagle", MATH]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "drafter.path" in err


def test_each_domain_keeps_its_own_recycling_table_across_requests(tiny, router, map_file):
    """Token Recycling's table persists across the requests of a domain and is not shared between
    domains (nor with dense fallbacks)."""
    controller = Controller(tiny, load_config_map(map_file), drafter_factory("recycling"), router)
    tables = {domain: drafter.adj for domain, drafter in controller._drafters.items()}
    assert set(tables) == {None, "translation", "math"} and len({id(t) for t in tables.values()}) == 3
    controller.generate("Translate to French: good morning", domain="translation", max_new_tokens=6)
    learned = tables["translation"].clone()
    assert (learned >= 0).any() and (tables["math"] == -1).all() and (tables[None] == -1).all()
    controller.generate("Translate to French: good night", domain="translation", max_new_tokens=6)
    kept = (learned >= 0).all(dim=1)
    assert controller._drafters["translation"].adj is tables["translation"]  # the same table, grown
    assert ((tables["translation"][kept] >= 0).all()) and (tables["translation"] >= 0).sum() >= (learned >= 0).sum()


# -- held-out verdicts: only held picks are served --------------------------------------------------------------------
VERDICT = st.sampled_from([None, "held", "inconclusive", "did not hold", "dense kept", "not evaluated"])


@given(verdicts=st.lists(VERDICT, min_size=1, max_size=4), serve_inconclusive=st.booleans())
def test_serving_runs_a_pick_only_when_its_held_out_verdict_allows(verdicts, serve_inconclusive):
    """Held (or dense kept): the pick. Did not hold: dense, always. Inconclusive or not evaluated:
    dense unless --serve-inconclusive. No verdict recorded (a hand-written map): as written. One
    line per domain says which, and why."""
    domains = {f"d{i}": dataclasses.replace(domain_config((1, 2), vocab_size=3), draft_vocab_ids=(0, 1, 2), verdict=v)
               for i, v in enumerate(verdicts)}
    served, lines = serving_plan(make_map(**domains), serve_inconclusive)
    assert len(lines) == len(verdicts)
    for (name, config), line, verdict in zip(served.domains.items(), lines, verdicts):
        runs_pick = verdict in (None, "held", "dense kept") or serve_inconclusive and verdict != "did not hold"
        assert line.startswith(f"domain {name}: ")
        if runs_pick:
            assert config == domains[name] and "dense, not" not in line
        else:
            assert (config.skip_layers, config.draft_vocab_ids, config.draft_vocab_size) == ((), None, None)
            assert config.accept_length == domains[name].dense.accept_length and config.verdict == verdict
            assert f"dense, not skip[1,2]|vocab=3: its held-out verdict is {verdict}" in line
            assert ("--serve-inconclusive" in line) == (verdict != "did not hold")


def test_an_inconclusive_pick_runs_dense_unless_asked(tiny, router, tmp_path, capsys):
    from specsparse.cli import main

    cmap = make_map(math=dataclasses.replace(domain_config((2, 3)), verdict="inconclusive"),
                    translation=dataclasses.replace(domain_config((1,)), verdict="held"))
    strict = Controller(tiny, cmap, drafter_factory("samd"), router)
    assert strict.generate(MATH, domain="math", max_new_tokens=4).skip_layers == ()
    assert strict.generate(TRANSLATION, domain="translation", max_new_tokens=4).skip_layers == (1,)
    loose = Controller(tiny, cmap, drafter_factory("samd"), router, serve_inconclusive=True)
    assert loose.generate(MATH, domain="math", max_new_tokens=4).skip_layers == (2, 3)
    path, _ = write_config_map(tmp_path / "map", cmap)
    args = ["generate", "--config-map", str(path), "--model", "tiny", "--max-new-tokens", "4", "--domain", "math", MATH]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "specsparse: domain math: dense, not skip[2,3]: its held-out verdict is inconclusive" in err
    assert "domain=math (tag) skip=[]" in err
    assert main([*args, "--serve-inconclusive"]) == 0
    err = capsys.readouterr().err
    assert "domain math: skip[2,3], held-out verdict inconclusive (served: --serve-inconclusive)" in err
    assert "domain=math (tag) skip=[2, 3]" in err
