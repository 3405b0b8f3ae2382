"""The Hydra app: every option of every config group composes and validates into specs (no model
loads), presets compose, and bad values fail before any model loads with one clear line."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HUB_ROWS, composed, plan_for, write_jsonl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from specsparse.data import get_domain
from specsparse.drafters.base import ConfiguredDrafter
from specsparse.jobs.config import GROUPS, ConfigError, build_plan
from specsparse.measuring.evaluation import Evaluator
from specsparse.search.base import LayerSkipSearch
from specsparse.search.tpe_vocab import TPEVocabSearch
from specsparse.study.runners.local import LocalRunner
from specsparse.study.study import search_context_of
from specsparse.types import Candidate

pytestmark = pytest.mark.usefixtures("embedded_models_installed")  # configs, not this machine's installs

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
SEARCH_PATH = (CONF, ROOT / "specsparse" / "data" / "conf")  # conf/config.yaml's hydra.searchpath adds the domains
HAS_CUDA = __import__("torch").cuda.is_available()


def options(group: str) -> list[str]:
    return sorted(p.stem for conf in SEARCH_PATH for p in (conf / group).glob("*.yaml"))


# -- composition -----------------------------------------------------------------------------------
def test_groups_have_options():
    for group in (*GROUPS, "experiment"):
        assert options(group), f"conf/{group}/ is empty"
    assert set(options("domain")) == {"translation", "summarization", "qa", "math", "rag", "mt_bench", "mmlu",
                                      "humaneval", "function_calling", "math500", "aime", "ner"}
    assert set(options("search")) == {"bfs", "greedy", "random", "accept_only", "metric_only", "tpe_vocab", "joint_vocab"}
    assert {"smollm2_135m", "gemma3_270m", "tiny", "vicuna_7b", "llama2_13b", "llama31_8b"} <= set(options("model"))


def test_default_is_the_quickstart(tmp_path):
    plan = plan_for([], tmp_path)
    assert plan.experiment == "quickstart"
    assert (plan.model.source, plan.model.dtype, plan.model.device) == ("smollm2-135m", "float32", "cpu")
    assert plan.evaluation.domain.name == "qa" and plan.evaluation.domain.limit == 100
    assert plan.evaluation.generation.max_new_tokens == 16 and plan.timing_prompts == 24
    assert plan.search.class_path == "specsparse.search.bfs.BFSSearch"
    assert plan.search.options["rule"].max_depth == 2 and plan.search.options["rule"].max_pool == 4
    assert plan.store_path == tmp_path / "outputs" / "store.sqlite"
    assert plan.output_dir.is_absolute()
    assert plan.data["n_calibration"] >= 20 and plan.data["n_test"] >= 4 * plan.data["n_calibration"] - 4


def _companions(group: str, option: str) -> list[str]:
    """Overrides an option needs to make sense on this machine (CPU models, LM-head drafters)."""
    extra = []
    if group == "model" and not HAS_CUDA:
        extra.append("model.device=cpu")
    if group == "search" and option in ("tpe_vocab", "joint_vocab"):
        extra.append("drafter=self_skip")
    if (group, option) == ("domain", "humaneval"):
        extra.append("domain.execute_code=true")
    return extra


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_group_option_validates(group, option, tmp_path, tiny):
    overrides = [f"{group}={option}", "model=tiny" if group != "model" else "", *_companions(group, option)]
    if (group, option) == ("drafter", "eagle"):  # a checkpoint for the tiny model
        from specsparse.drafters.eagle.checkpoint import save_eagle_head
        from specsparse.drafters.eagle.head import EagleHead, head_config

        save_eagle_head(EagleHead(head_config(tiny.model.config)), tmp_path / "eagle")
        overrides.append(f"drafter.path={tmp_path / 'eagle'}")
    if group == "domain" and option in HUB_ROWS:  # a local file in the Hub's format, not the network
        data = write_jsonl(tmp_path / "data.jsonl", HUB_ROWS[option](10))
        overrides += ["domain.path=json", f"+domain.options.data_files={data}", f"+domain.options.cache_dir={tmp_path / 'hf'}"]
    plan = plan_for([o for o in overrides if o], tmp_path)
    if group == "model":
        assert plan.model.name == option and plan.model.num_layers and plan.model.vocab_size
    elif group == "drafter":
        cls = plan.evaluation.drafter.cls
        assert issubclass(cls, ConfiguredDrafter)
        job = {"exclude_ids": (), "verification_costs": lambda: (1.0, 1.05, 1.08, 1.2)}  # what a job provides
        # instantiated for real on the tiny model
        drafter = plan.evaluation.drafter.build(target=tiny, **{name: job[name] for name in cls.job_context})
        assert isinstance(drafter, cls)
    elif group == "domain":
        assert plan.evaluation.domain.name == option
        assert plan.data["n_calibration"] >= 1 and plan.data["n_test"] >= 1
    elif group == "search":
        cls = plan.search.cls
        assert issubclass(cls, (LayerSkipSearch, TPEVocabSearch))
        context = search_context_of(Evaluator(plan.evaluation), cls.context_arguments)
        strategy = pickle.loads(pickle.dumps(context)).build(plan.search)  # as a job builds it, from a Ray worker's context
        assert Candidate() in strategy.ask()  # proposes the dense baseline first
    elif group == "runner":
        assert hasattr(plan.runner.cls, "evaluate_batch")
        if option == "local":
            runner = plan.runner.build()
            assert isinstance(runner, LocalRunner)
            [dense] = runner.evaluate_batch(plan.evaluation, [Candidate()])
            assert dense.new_tokens > 0 and len(dense.per_prompt) == plan.data["n_calibration"]
    elif group == "logger":
        if option == "none":
            assert plan.logger is None
        else:
            logger = plan.logger.build()
            assert logger.mode == "offline"  # tests run with WANDB_MODE=offline; the default is offline too


GPU_PRESETS = {"paper_tss": ["paper_data.spec_bench={data}/spec_bench/question.jsonl", "paper_data.mmlu={data}/mmlu"],
               "paper_tss_eagle": ["paper_data.spec_bench={data}/spec_bench/question.jsonl", "paper_data.mmlu={data}/mmlu"],
               "paper_vocab": ["paper_data.spec_bench={data}/spec_bench/question.jsonl",
                               "paper_data.gsm8k={data}/gsm8k/test.jsonl",
                               "paper_data.training_prompts={data}/spec_bench/question.jsonl"]}


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_preset_validates(experiment, tmp_path, request):
    """Every preset validates into a plan, the GPU ones too where their models are absent (on the
    public data, on this machine's device). A `_cpu` twin shares its preset's README, as do the
    paper's EAGLE rows (paper_tss_eagle)."""
    overrides = [f"experiment={experiment}"]
    if experiment in GPU_PRESETS:
        data = request.getfixturevalue("shared_data")
        overrides += [o.format(data=data) for o in GPU_PRESETS[experiment]] + ([] if HAS_CUDA else ["model.device=cpu"])
    plan = plan_for(overrides, tmp_path)
    assert plan.experiment == experiment
    readme = {"paper_tss_eagle": "paper_tss"}.get(experiment, experiment.removesuffix("_cpu"))  # rows of its table
    assert (ROOT / "experiments" / readme / "README.md").is_file()


@pytest.mark.parametrize("experiment", sorted(GPU_PRESETS))
def test_gpu_presets_compose_as_the_papers_set_them_up(experiment, tmp_path):
    """`run.py experiment=... --cfg job --resolve` composes with no model, data or GPU present, one
    multirun covers the papers' domains, and each domain reads its own source."""
    done = _run_app([f"experiment={experiment}", "--cfg", "job", "--resolve"], tmp_path)
    assert done.returncode == 0, done.stderr
    job = __import__("yaml").safe_load(done.stdout)
    assert job["model"]["device"] == "cuda" and job["domain"]["calibration_fraction"] == 0.2
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        sweep = compose("config", overrides=[f"experiment={experiment}"], return_hydra_config=True)
    domains = sweep.hydra.sweeper.params.domain.split(",")
    sources = {d: composed([f"experiment={experiment}", f"domain={d}"])["domain"]["source"] for d in domains}
    if experiment == "paper_tss":  # SAM-Decoding with Token Recycling drafting a tree, as their papers do
        assert job["model"]["name"] == "llama2_13b" and job["drafter"]["recycling_fallback"] is True
        assert job["drafter"]["recycling_tree"] and job["drafter"]["corpus"] == ["builtin"]
    if experiment == "paper_tss_eagle":
        assert job["model"]["name"] == "vicuna_7b" and job["drafter"]["tree"] == [10, 59]
    if experiment.startswith("paper_tss"):
        assert set(domains) == {"translation", "summarization", "qa", "rag", "mmlu"}
        assert sources == {"translation": "spec_bench", "summarization": "spec_bench", "qa": "spec_bench",
                           "rag": "spec_bench", "mmlu": "mmlu"}
        assert job["tss"]["max_pool"] is None and job["tss"]["tau"] == job["tss"]["eps_accept"] == 0.05
        assert (job["tss"]["feasibility"], job["tss"]["select"]) == ("point", "measured")
    else:
        assert job["model"]["name"] == "llama31_8b" and job["search"]["_target_"].endswith("TPEVocabSearch")
        assert sources == {"mt_bench": "spec_bench", "math": "gsm8k"}


def test_preset_sweeps_and_any_search_combine(tmp_path):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=tss_main"], return_hydra_config=True)
    assert "mmlu" in cfg.hydra.sweeper.params.domain
    # Presets set shared settings (tss.*), so every layer-skip search works with every preset.
    for search in ("bfs", "greedy", "random", "accept_only", "metric_only"):
        plan = plan_for([f"search={search}", "experiment=strategy_comparison", "model=tiny"], tmp_path)
        assert plan.search.options["rule"].max_depth == 3


def test_command_line_group_choice_beats_the_preset(tmp_path):
    plan = plan_for(["experiment=tss_main", "search=greedy", "model=tiny"], tmp_path)
    assert plan.search.class_path.endswith("GreedySearch")


def test_relative_paths_resolve_against_the_launch_directory(tmp_path, shared_data):
    link = tmp_path / "data"
    link.symlink_to(shared_data)
    plan = plan_for(["model=tiny", "domain=math", "domain.source=gsm8k", "domain.path=data/gsm8k/test.jsonl",
                     "domain.limit=20", "paths.outputs=out"], tmp_path)
    assert plan.evaluation.domain.path == str(tmp_path / "data" / "gsm8k" / "test.jsonl")
    assert plan.store_path == tmp_path / "out" / "store.sqlite"


def test_library_never_imports_hydra():
    code = ("import sys, specsparse.jobs.config, specsparse.reporting.report, specsparse.study.runners.ray, specsparse.reporting.wandb_logger, "
            "specsparse.cli, specsparse.jobs.job, specsparse.jobs.sweep; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('hydra', 'omegaconf')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# -- bad values ------------------------------------------------------------------------------------
BAD = [
    (["drafter=self_skip", "drafter.skip_layers=[99]"], "drafter.skip_layers"),
    (["drafter=self_skip", "drafter.skip_layers=[0,1,2,3]"], "drafter.skip_layers"),
    (["tss.protect_layers=[4]"], "tss.protect_layers"),
    (["+tss.max_width=3"], "tss: unknown option(s) ['max_width']"),
    (["tss.max_pool=2.5"], "tss.max_pool"),
    (["domain.name=poetry"], "domain.name"),
    (["domain.source=nowhere"], "domain.source"),
    (["domain.source=gsm8k", "domain=math", "domain.path=/no/such/file.jsonl"], "domain.path"),
    (["domain.limit=1"], "domain.limit"),
    (["domain.metric=bleu4"], "metric 'bleu4' is unknown"),
    (["domain.answer_format=letter"], "answer_format"),
    (["domain.turn_template=Question"], "turn_template"),
    (["domain.input_template=5"], "input_template must be a string"),
    (["domain.metric=[squad]"], "metric must be a string"),
    (["+domain.prompt_field=q"], "domain.prompt_field is not a domain setting"),
    (["+search.max_width=3"], "max_width"),
    (["search=tpe_vocab"], "self_skip"),
    (["model.dtype=float8"], "model.dtype"),
    (["generation.max_new_tokens=0"], "max_new_tokens"),
    (["measure.mode=fast"], "measure.mode"),
    (["measure.batch_size=0"], "measure.batch_size"),
    (["+measure.rows=4"], "measure"),
    (["runner=ray", "runner.num_workers=0"], "num_workers"),
    (["+runner.workers=3"], "workers"),
    (["logger.mode=sometimes"], "logger.mode"),
    (["drafter._target_=specsparse.drafters.nope.Nope"], "drafter._target_"),
    (["search._target_=specsparse.types.Candidate"], "search._target_"),
    (["generation.max_new_tokens=1.5"], "generation.max_new_tokens"),
    (["generation.temperature=hot"], "generation.temperature"),
    (["+generation.beams=2"], "beams"),
    (["seed=abc"], "seed"),
    (["domain.split_seed=x"], "domain.split_seed"),
    (["runner=ray", "runner.gpus_per_trial=abc"], "gpus_per_trial"),
    (["domain.exclude_ids=[qa-001,no-such-id]"], "exclude_ids"),
    (["tss.feasibility=median"], "feasibility"),
    (["runner=ray", "runner.address=127.0.0.1:1"], "no Ray cluster answers at 127.0.0.1:1"),
    (["runner=ray", "runner.address=nonsense"], "HOST:PORT"),
    (["timing_prompts=0"], "timing_prompts"),
]


@pytest.mark.parametrize("overrides,needle", BAD)
def test_bad_values_raise_one_line_config_errors(overrides, needle, tmp_path):
    with pytest.raises(ConfigError) as info:
        plan_for(["model=tiny", *overrides], tmp_path)
    message = str(info.value)
    assert needle in message and "\n" not in message


def test_a_domain_of_your_own_is_one_file(tmp_path):
    """A YAML with a domain's fields, on Hydra's search path, is a domain: its prompts load, split and
    measure, under its own template and metric."""
    prompts = tmp_path / "limericks.jsonl"
    prompts.write_text("".join(f'{{"q": "Rhyme {i} with cat.", "a": "hat"}}\n' for i in range(10)))
    definition = dict(get_domain("rag").__dict__, name="poetry", turn_template="Poem: {turn}", source="jsonl",
                      path=str(prompts), options={"prompt_field": "q", "reference_field": "a"}, exclude_ids=[])
    (tmp_path / "conf" / "domain").mkdir(parents=True)
    (tmp_path / "conf" / "domain" / "poetry.yaml").write_text(OmegaConf.to_yaml(definition))
    plan = plan_for(["model=tiny", "domain=poetry", f"hydra.searchpath=[pkg://specsparse.data.conf,file://{tmp_path / 'conf'}]"],
                    tmp_path)
    assert plan.evaluation.domain.name == "poetry" and plan.evaluation.domain.metric == "answer_in_list"
    assert (plan.data["n_calibration"], plan.data["n_test"]) == (2, 8)
    [dense] = LocalRunner().evaluate_batch(plan.evaluation, [Candidate()])
    assert len(dense.per_prompt) == 2 and dense.metric is not None


class HeldOutDrafter(ConfiguredDrafter):
    """A drafter the package does not know: its job check refuses a job that measures `forbidden`."""

    name = "held_out"
    jobs: list = []  # the PlannedJob of every check

    def __init__(self, forbidden: str = ""):
        self.forbidden = forbidden

    @classmethod
    def check_job(cls, options, job):
        cls.jobs.append(job)
        if options.get("forbidden") in job.measured_ids:
            raise ValueError(f"drafter {cls.name} must not be built from {options['forbidden']}, a prompt this job measures")


def test_a_drafter_checks_itself_against_the_job_it_is_in(tmp_path):
    """build_plan calls any drafter class's `check_job` with the job around it (its domain's measured
    ids, the model, the search), though jobs/config names no drafter class; a refusal is one line."""
    config = composed(["model=tiny", "domain=qa", "domain.limit=10"])
    config["drafter"] = {"_target_": f"{__name__}.HeldOutDrafter", "forbidden": "math-001"}
    HeldOutDrafter.jobs.clear()
    plan = build_plan(config, output_dir=tmp_path / "job", cwd=tmp_path)
    assert plan.evaluation.drafter.cls is HeldOutDrafter
    (job,) = HeldOutDrafter.jobs
    assert (job.domain, job.domain_limit, job.model_source, job.search) == ("qa", 10, "tiny", "bfs")
    assert not job.trims_vocabulary and not job.train_at_k and job.vocab_corpus == plan.evaluation.vocab_corpus
    assert job.measured_ids == {ex.id for ex in get_domain("qa", limit=10).load("all")}
    forbidden = sorted(job.measured_ids)[0]
    config["drafter"]["forbidden"] = forbidden
    with pytest.raises(ConfigError) as info:
        build_plan(config, output_dir=tmp_path / "job", cwd=tmp_path)
    assert str(info.value) == f"drafter held_out must not be built from {forbidden}, a prompt this job measures"
    # What the job's vocabulary options ask of a drafter are class queries too: this one knows no training replies.
    with pytest.raises(ConfigError, match="vocab_corpus drafter_responses: drafter held_out has no training replies"):
        build_plan({**config, "vocab_corpus": ["drafter_responses"]}, output_dir=tmp_path / "job", cwd=tmp_path)


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU")
def test_impossible_gpu_requests_fail_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match="GPU"):
        plan_for(["model=tiny", "runner=ray", "runner.gpus_per_trial=1"], tmp_path)
    with pytest.raises(ConfigError, match="CUDA"):
        plan_for(["model=vicuna_7b"], tmp_path)


def _run_app(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECSPARSE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), f"paths.outputs={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'run'}",
         *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("args,needle", [
    (["drafter=self_skip", "drafter.skip_layers=[99]"], "out of range"),
    (["runner=ray", "runner.gpus_per_trial=1"], "GPU"),
    (["domain.name=poetry"], "no built-in set"),
    (["domain=humaneval"], "domain.execute_code=true"),
])
def test_run_py_prints_one_line_and_exits_before_the_model_loads(args, needle, tmp_path):
    if HAS_CUDA and "gpus_per_trial" in str(args):
        pytest.skip("this machine has a GPU")
    done = _run_app(args, tmp_path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    # The default model is SmolLM2 from a GGUF converted into SPECSPARSE_CACHE on first load: nothing
    # there means no model was loaded.
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "out" / "store.sqlite").exists()


@pytest.mark.slow
def test_specsparse_run_runs_a_job_from_the_packaged_conf_anywhere(tmp_path):
    """`specsparse run` composes the packaged conf (no checkout beside it: cwd is an empty folder) and runs
    the job `python run.py` would, logging into the job's run.log."""
    env = {**os.environ, "SPECSPARSE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "specsparse.cli", "run", "model=tiny", "domain.limit=10", "generation.max_new_tokens=6",
         "tss.max_depth=1", "timing_prompts=2", "progress=false", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "run" / "summary.json").is_file() and (tmp_path / "outputs" / "store.sqlite").is_file()
    assert "held-out verdict" in (tmp_path / "run" / "run.log").read_text()
    bad = subprocess.run([sys.executable, "-m", "specsparse.cli", "run", "model=tiny", "domain.name=poetry"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: ") and "poetry" in bad.stderr


def test_the_package_carries_every_config_file():
    """pyproject's package-data patterns cover each file of specsparse/conf (conf/ of a checkout links there),
    so an installed specsparse composes what a checkout does."""
    from fnmatch import fnmatch

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["specsparse"]
    files = [p.relative_to(ROOT / "specsparse").as_posix() for p in (ROOT / "specsparse" / "conf").rglob("*.yaml")]
    assert len(files) > 30 and CONF.resolve() == (ROOT / "specsparse" / "conf")
    assert [f for f in files if not any(fnmatch(f, p) and f.count("/") == p.count("/") for p in patterns)] == []


def test_run_py_unknown_group_option_is_hydras_clear_error(tmp_path):
    done = _run_app(["model=gpt5"], tmp_path)
    assert done.returncode != 0
    assert "Could not find 'model/gpt5'" in done.stderr and "smollm2_135m" in done.stderr


def test_the_readmes_loader_options_compose():
    """The README's way to pass loader options (Hydra's `+` adds a key to the domain's `options: {}`)."""
    assert composed(["domain=qa", "+domain.options.references=/abs/answers.jsonl"])["domain"]["options"] == {
        "references": "/abs/answers.jsonl"}
    assert composed(["domain=mmlu", "+domain.options.subjects=[anatomy,astronomy]"])["domain"]["options"] == {
        "subjects": ["anatomy", "astronomy"]}


def test_the_held_out_verdict_applies_the_rules_metric_tolerance(tmp_path):
    """tss.eps_metric reaches the held-out verdict as it reaches the search (the rule is one object)."""
    from specsparse.jobs.job import run_plan

    plan = plan_for(["model=tiny", "logger=none", "domain.limit=8", "generation.max_new_tokens=8", "tss.max_depth=1",
                     "tss.eps_metric=0.2", "timing_prompts=2", "progress=false", f"paths.outputs={tmp_path}"], tmp_path)
    job = run_plan(plan)
    assert job.eps_metric == 0.2 and job.summary()["guard"]["eps_metric"] == 0.2


def test_the_config_map_records_the_held_out_verdict_serving_routes_by(tmp_path):
    """The job's config map carries the pick's held-out verdict and its checks, as summary.json has them."""
    from specsparse.config_map import load_config_map
    from specsparse.jobs.job import run_plan

    plan = plan_for(["model=tiny", "logger=none", "domain.limit=8", "generation.max_new_tokens=8", "tss.max_depth=1",
                     "tss.feasibility=point", "tss.eps_accept=0.99", "tss.eps_metric=0.99", "tss.guard=task",
                     "timing_prompts=2", "progress=false", f"paths.outputs={tmp_path}"], tmp_path)
    job = run_plan(plan)
    assert job.search_result.selected.skip_layers  # a sparse pick, so the verdict has checks
    held_out = job.summary()["held_out"]
    entry = load_config_map(plan.output_dir / "config_map.yaml").domains[plan.evaluation.domain.name]
    assert held_out["verdict"] and entry.verdict == held_out["verdict"]
    assert held_out["checks"] and entry.verdict_checks == {
        name: {key: check[key] for key in ("interval", "threshold", "state")} for name, check in held_out["checks"].items()}
