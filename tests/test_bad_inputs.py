"""Every bad input a user can give the two entry points, as real processes (slow: one process each):
exit code 2, one `error:` line naming the problem, no traceback, and nothing written (no results
store, no run folder but the record of a failed start, a damaged store left as it was)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from specsparse.study.store import ResultsStore

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model=tiny", "logger=none", "progress=false", "domain.limit=10"]

# (entry point, arguments, what the one line must name). {tmp}: the case's folder (see `prepare`).
CASES = [
    ("run.py", [*TINY, "generation.max_new_tokens=1.5"], "generation.max_new_tokens"),
    ("run.py", [*TINY, "generation.max_new_tokens=0"], "max_new_tokens"),
    ("run.py", [*TINY, "generation.draft_length=sometimes"], "draft_length"),
    ("run.py", [*TINY, "generation.num_draft_tokens=0"], "generation.num_draft_tokens=0"),
    ("run.py", [*TINY, "tss.select=measured", "tss.measured_prompts=1"], "measured_prompts"),
    ("run.py", [*TINY, "domain=humaneval"], "domain.execute_code=true"),
    ("run.py", [*TINY, "generation.verify_cost_per_token=-1"], "verify_cost_per_token"),
    ("run.py", [*TINY, "seed=abc"], "seed"),
    ("run.py", [*TINY, "timing_prompts=0"], "timing_prompts"),
    ("run.py", [*TINY, "runner=ray", "runner.gpus_per_trial=abc"], "gpus_per_trial"),
    ("run.py", [*TINY, "runner=ray", "runner.num_workers=0"], "num_workers"),
    ("run.py", [*TINY, "runner=ray", "runner.address=127.0.0.1:1"], "127.0.0.1:1"),
    ("run.py", [*TINY, "drafter=self_skip", "drafter.skip_layers=[99]"], "out of range"),
    ("run.py", [*TINY, "tss.protect_layers=[4]"], "protect_layers"),
    ("run.py", [*TINY, "tss.max_depth=0"], "max_depth"),
    ("run.py", [*TINY, "domain.name=poetry"], "domain.name"),
    ("run.py", [*TINY, "domain.source=nowhere"], "domain.source"),
    ("run.py", [*TINY, "domain=math", "domain.source=gsm8k", "domain.path=/no/such/file.jsonl"], "domain.path"),
    ("run.py", [*TINY, "domain.exclude_ids=[qa-999]"], "exclude_ids"),
    ("run.py", [*TINY, "domain.limit=1"], "domain.limit"),
    ("run.py", [*TINY, "domain.source=jsonl", "domain.path={tmp}/bad.jsonl"], "bad.jsonl:2"),
    ("run.py", [*TINY, "domain.source=jsonl", "domain.path={tmp}/latin.jsonl"], "not UTF-8"),
    ("run.py", [*TINY, "vocab_corpus=[nope.jsonl]"], "vocab_corpus"),
    ("run.py", [*TINY, "measure.mode=fast"], "measure.mode"),
    ("run.py", [*TINY, "measure.batch_size=0"], "measure.batch_size"),
    ("run.py", [*TINY, "model.dtype=float8"], "model.dtype"),
    ("run.py", [*TINY, "model.device=cuda:3"], "model.device"),
    ("run.py", [*TINY, "model.forward_path=compiled"], "model.forward_path"),
    ("run.py", [*TINY, "model.num_layers=true"], "model.num_layers"),
    ("run.py", [*TINY, "model.vocab_size=false"], "model.vocab_size"),
    ("run.py", [*TINY, "tss.protect_layers=[0,1,2,3]"], "nothing to skip"),
    ("run.py", [*TINY, "model.dtype=float16", "model.forward_path=fast"], "model.forward_path=fast"),
    ("run.py", [*TINY, "model.source=/no/such/model"], "model.source"),
    ("run.py", [*TINY, "search=tpe_vocab"], "LM head"),
    ("run.py", [*TINY, "+search.max_width=3"], "max_width"),
    ("run.py", [*TINY, "logger=wandb", "logger.mode=sometimes"], "logger.mode"),
    ("run.py", [*TINY, "paths.store={tmp}/damaged.sqlite"], "damaged"),
    ("run.py", [*TINY, "cost.profile=/nonexistent/profile.json"], "cost.profile"),
    ("run.py", [*TINY, "cost.profile={tmp}/bad.jsonl"], "not valid JSON"),
    ("run.py", [*TINY, "cost.profile={tmp}/map.yaml"], "format"),
    ("run.py", [*TINY, "+cost.speed=1"], "cost: unknown option"),
    # Numbers, booleans, strings and lists as their options declare them, checked before anything loads.
    ("run.py", [*TINY, "generation.temperature=nan"], "generation.temperature"),
    ("run.py", [*TINY, "generation.temperature=inf"], "generation.temperature"),
    ("run.py", [*TINY, "generation.max_new_tokens=100000000000000000000000"], "max_new_tokens"),
    ("run.py", [*TINY, "seed=12345678901234567890123"], "seed"),
    ("run.py", [*TINY, "tss.max_depth=2.5"], "tss.max_depth"),
    ("run.py", [*TINY, "tss.max_pool=2.5"], "tss.max_pool"),
    ("run.py", [*TINY, "tss.eps_accept=nan"], "tss.eps_accept"),
    ("run.py", [*TINY, "tss.early_reject=maybe"], "tss.early_reject"),
    ("run.py", [*TINY, "tss.guard=maybe"], "guard"),
    ("run.py", [*TINY, "tss.min_fidelity=200"], "min_fidelity"),
    ("run.py", [*TINY, "search=random", "search.draws=1.5"], "search.draws"),
    ("run.py", [*TINY, "search.weight_accept=abc"], "search.weight_accept"),
    ("run.py", [*TINY, "search.max_measurements=true"], "max_measurements"),
    ("run.py", [*TINY, "evaluate_test=maybe"], "evaluate_test"),
    ("run.py", [*TINY, "domain.name=[qa]"], "domain.name"),
    ("run.py", [*TINY, "domain.exclude_ids=[1]"], "exclude_ids"),
    ("run.py", [*TINY, "paths.store="], "paths.store"),
    ("run.py", [*TINY, "model.device=cuda:abc"], "model.device"),
    ("run.py", [*TINY, "model.device=cuda:-1"], "model.device"),
    ("run.py", [*TINY, "drafter=pld", "drafter.max_ngram_size=0"], "max_ngram_size"),
    ("run.py", [*TINY, "drafter=samd", "drafter.min_match=0"], "min_match"),
    ("run.py", [*TINY, "drafter=recycling", "drafter.top_k=0"], "top_k"),
    ("run.py", [*TINY, "drafter=recycling", "drafter.tree=[9]"], "tree"),
    ("run.py", [*TINY, "drafter=recycling", "drafter.tree=[3,2]", "generation.temperature=0.7"], "greedily"),
    ("run.py", [*TINY, "paths.store={tmp}/job"], "paths.store"),
    ("run.py", [*TINY, "paths.store={tmp}/map.yaml/store.sqlite"], "paths.store"),
    ("run.py", [*TINY, "search=greedy", "search.sparsity_weight=nan"], "sparsity_weight"),
    ("run.py", [*TINY, "domain.exclude_ids=qa-00000"], "exclude_ids"),
    ("run.py", [*TINY, "domain.source=jsonl", "domain.path={tmp}/number.jsonl"], "must be a string"),
    ("run.py", [*TINY, "model.source={tmp}/job"], "model.source"),
    ("run.py", [*TINY, "drafter=eagle", "drafter.path={tmp}/job"], "drafter.path"),
    ("run.py", [*TINY, "tss.eps_accept=-0.1"], "eps_accept"),
    ("run.py", [*TINY, "generation.num_draft_tokens=-1"], "num_draft_tokens"),
    ("run.py", [*TINY, "vocab_comparison={subsamples: 2}"], "search=tpe_vocab"),
    ("run.py", [*TINY, "search=tpe_vocab", "drafter=self_skip", "vocab_comparison={subsamples: 2}"], "train_at_k"),
    ("run.py", [*TINY, "search=tpe_vocab", "drafter=self_skip", "vocab_comparison={fixed_fractions: [2]}"],
     "fixed_fractions"),
    ("run.py", [*TINY, "search=tpe_vocab", "drafter=self_skip", "vocab_comparison={often: 1}"], "often"),
    ("run.py", [*TINY, "search=tpe_vocab", "drafter=self_skip", "vocab_corpus=[drafter_responses]"],
     "drafter_responses"),
    ("run.py", [*TINY, "drafter=eagle", "drafter.path={tmp}/heads", "drafter.train={epochs: 0}"], "epochs"),
    ("run.py", [*TINY, "drafter=eagle", "drafter.path={tmp}/heads", "drafter.train={domains: [poetry]}"], "poetry"),
    ("run.py", [*TINY, "drafter=eagle", "drafter.path={tmp}/heads", "drafter.train={speed: 1}"], "speed"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--max-new-tokens", "0", "hi"],
     "--max-new-tokens"),
    ("cli", ["generate", "--model", "tiny", "hi"], "--config-map"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--dtype", "float16", "--forward-path",
             "fast", "hi"], "forward_path=fast"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/missing.yaml", "hi"], "missing.yaml"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--prompts", "{tmp}/bad.jsonl"], "bad.jsonl:2"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/other_model.yaml", "hi"], "another model"),
    ("cli", ["serve", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--num-draft-tokens", "-1"], "--num-draft-tokens"),
    ("cli", ["serve", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--port", "99999"], "--port"),
    ("cli", ["serve", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--draft-length", "long"], "--draft-length"),
    ("cli", ["serve", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--host", "0.0.0.0"], "API key"),
    ("cli", ["profile", "--model", "tiny", "--threads", "0"], "--threads"),
    ("cli", ["train-drafter", "--model", "tiny", "--output", "{tmp}/head", "--threads", "0"], "--threads"),
    ("cli", ["export", "--eagle-head", "{tmp}/empty", "--output", "{tmp}/official"], "no EAGLE checkpoint"),
    ("cli", ["export", "--eagle-head", "{tmp}/empty"], "--output"),
    ("cli", ["train-drafter", "--model", "tiny", "--output", "{tmp}/head", "--ttt-steps", "0"], "ttt steps"),
    ("cli", ["report", "{tmp}/empty"], "no finished jobs"),
    ("cli", ["report", "{tmp}", "--publish", "nobody"], "ENTITY/PROJECT"),
    ("cli", ["report", "{tmp}", "--mixed-stream", "0"], "--mixed-stream"),
    ("cli", ["report", "{tmp}/job", "--strategy", "nonsense"], "--strategy nonsense"),
    ("cli", ["report", "{tmp}/job", "--out", "{tmp}/map.yaml"], "--out"),
    ("cli", ["report", "{tmp}/job", "--out", "{tmp}/map.yaml/report"], "--out"),
    ("cli", ["report", "{tmp}/truncated"], "summary.json: unreadable"),
    ("cli", ["report", "{tmp}/partial"], "summary.json: a job summary without search_cost.configurations_measured"),
    ("cli", ["report", "{tmp}/no-such-folder"], "no-such-folder"),
    ("cli", ["report", "{tmp}/job", "--wandb", "nobody"], "ENTITY/PROJECT"),
    ("cli", ["report", "{tmp}/job", "--store", "{tmp}/damaged.sqlite"], "damaged.sqlite"),
    ("cli", ["report", "{tmp}/job", "--store", "{tmp}/garbled.sqlite"], "garbled"),
    ("cli", ["report", "{tmp}/job", "--out", "/proc/specsparse-report"], "--out"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--temperature", "nan", "hi"],
     "--temperature"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--output", "{tmp}/out.jsonl", "hi"],
     "--output"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--prompts", "{tmp}/prompts.jsonl",
             "--output", "{tmp}"], "--output"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--min-confidence", "2", "hi"],
     "--min-confidence"),
    ("cli", ["serve", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--host", "no host!", "--insecure"],
     "--host"),
    ("cli", ["serve", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--request-timeout", "inf"],
     "--request-timeout"),
    ("cli", ["serve", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--max-queue", "-1"], "--max-queue"),
    ("cli", ["train-drafter", "--model", "tiny", "--output", "{tmp}/map.yaml"], "is a file"),
    ("cli", ["train-drafter", "--model", "tiny", "--output", "{tmp}/head", "--vocab-file", "{tmp}/bad.jsonl"],
     "--vocab-file"),
    ("cli", ["train-drafter", "--model", "tiny", "--output", "{tmp}/head", "--vocab-file", "{tmp}/ids.json"],
     "token ids must be within"),
    ("cli", ["train-drafter", "--model", "tiny", "--output", "{tmp}/head", "--vocab-size", "100000000"],
     "--vocab-size"),
    ("cli", ["train-drafter", "--model", "tiny", "--output", "{tmp}/head", "--learning-rate", "inf"], "learning rate"),
    ("cli", ["train-drafter", "--model", "tiny", "--output", "{tmp}/head", "--prompts", "{tmp}/missing.jsonl"],
     "--prompts"),
    # Counts have upper bounds, devices must exist, a folder must not be a file.
    ("run.py", [*TINY, "generation.num_draft_tokens=100000"], "num_draft_tokens must be in 0..64"),
    ("run.py", [*TINY, "measure.batch_size=100000000"], "measure.batch_size"),
    ("run.py", [*TINY, "tss.max_depth=1000"], "tss.max_depth"),
    ("run.py", [*TINY, "drafter=recycling", "drafter.top_k=100000000"], "top_k must be in 1..256"),
    ("run.py", [*TINY, "drafter=recycling", "drafter.warm_corpus=[]"], "warm_corpus"),
    ("run.py", [*TINY, "drafter=recycling", "drafter.warm_corpus=[nope.jsonl]"], "drafter.warm_corpus"),
    ("run.py", [*TINY, "paths.outputs={tmp}/map.yaml"], "paths.outputs"),
    ("run.py", [*TINY, "paths.outputs={tmp}/map.yaml/outputs"], "paths.outputs"),
    ("run.py", [*TINY, "paths.outputs=/proc/specsparse"], "paths.outputs"),
    ("run.py", ["-m", *TINY, "paths.outputs=/proc/specsparse"], "paths.outputs"),
    ("run.py", [*TINY, "objective=measured_speedup_test_vs_plain"], "measured_speedup_calibration_vs_plain"),
    ("run.py", [*TINY, "objective_timing.repeats=0"], "objective_timing.repeats"),
    ("cli", ["serve", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--num-draft-tokens", "100000"],
     "--num-draft-tokens"),
    ("cli", ["generate", "--model", "tiny", "--config-map", "{tmp}/map.yaml", "--seed", "99999999999999999999999",
             "hi"], "--seed"),
    ("cli", ["profile", "--model", "tiny", "--device", "cuda:abc"], "--device cuda:abc"),
    ("cli", ["profile", "--model", "tiny", "--device", "cuda:7"], "--device cuda:7"),
    ("cli", ["report", "{tmp}/job", "--merge-config-map", "{tmp}/map.yaml/maps/all"], "--merge-config-map"),
    ("cli", ["submit", "--dry-run"], "nothing to run"),
    ("cli", ["submit", "--dry-run", "--env", "NOEQUALS", "--", "python", "run.py", "paths.outputs=/x"], "--env"),
    # The cluster: where a submitted job's outputs go, its runtime_env, the dashboard, GPUs, the store.
    ("cli", ["submit", "--dry-run", "--", "python", "run.py"], "paths.outputs"),
    ("cli", ["submit", "--dry-run", "--runtime-env", "{tmp}/bad_env.yaml", "--", "python", "run.py", "paths.outputs=/x"],
     "does not parse"),
    ("cli", ["submit", "--dry-run", "--entrypoint-resources", "[1]", "--", "python", "run.py", "paths.outputs=/x"],
     "--entrypoint-resources"),
    ("cli", ["submit", "--address", "http://127.0.0.1:1", "--", "python", "run.py", "paths.outputs=/x"],
     "no Ray cluster answers at 127.0.0.1:1"),
    ("run.py", [*TINY, "runner=ray", "model.device=cuda"], "runner.gpus_per_trial=1"),
    ("run.py", [*TINY, "runner=ray", "runner.gpus_per_trial=1"], "GPU"),
    ("run.py", [*TINY, "runner=ray", "runner.runtime_env=[pip]"], "runtime_env"),
    ("run.py", ["-m", *TINY, "hydra/launcher=ray", "hydra.launcher.max_parallel_jobs=0"], "max_parallel_jobs"),
    ("cli", ["profile", "--model", "/no/such/model"], "/no/such/model"),
    ("cli", ["generate", "--model", "./no/such/model", "--config-map", "{tmp}/map.yaml", "hi"], "./no/such/model"),
    ("cli", ["train-drafter", "--model", "/no/such.gguf", "--output", "{tmp}/head"], "/no/such.gguf"),
]

# Found only once the model has loaded, and why that cannot be earlier: every other case is refused before.
AFTER_LOADING = {
    "another model": "the config map is checked against the loaded model's identity",
    "--vocab-size": "the target's vocabulary size is known once it loads",
    "token ids must be within": "the target's vocabulary size is known once it loads",
}


def prepare(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bad.jsonl").write_text('{"prompt": "a", "reference": "b"}\n{"prompt": \n')
    (folder / "bad_env.yaml").write_text("pip: [a\n b: ]\n")
    (folder / "latin.jsonl").write_bytes('{"prompt": "a"}\n{"prompt": "caf\u00e9"}\n'.encode("latin-1"))
    (folder / "damaged.sqlite").write_bytes(b"this is not a database" * 100)
    ResultsStore(folder / "garbled.sqlite").close()  # a store whose one row is not JSON
    with sqlite3.connect(folder / "garbled.sqlite") as conn:
        conn.execute("INSERT INTO measurements (key, meta, measurement, created) VALUES ('k', 'not json', '{}', 0)")
    entry = {"skip_layers": [1], "accept_length": 1.5, "metric": None, "sparsity": 0.25, "modeled_cost": 0.01,
             "flops_fraction": 0.75, "draft_vocab_size": None,
             "dense": {"skip_layers": [], "accept_length": 1.5, "metric": None, "modeled_cost": 0.012}}
    good = {"model": "tiny", "num_layers": 4, "domains": {"qa": entry}}
    (folder / "map.yaml").write_text(json.dumps(good))
    (folder / "other_model.yaml").write_text(json.dumps({**good, "model_identity": {"name": "someone-else"}}))
    (folder / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    (folder / "number.jsonl").write_text('{"prompt": "a", "reference": "b"}\n{"prompt": 123, "reference": "b"}\n')
    (folder / "ids.json").write_text("[1, 2, 99999999]")  # beyond the tiny model's vocabulary
    (folder / "job").mkdir()
    job_summary = {"domain": "qa", "strategy": "bfs", "metric": None, "search_cost": {"configurations_measured": 0}}
    (folder / "job" / "summary.json").write_text(json.dumps(job_summary))
    (folder / "empty").mkdir()
    (folder / "truncated").mkdir()
    (folder / "truncated" / "summary.json").write_text('{"domain": "qa", "strat')
    (folder / "partial").mkdir()
    (folder / "partial" / "summary.json").write_text('{"domain": "qa", "strategy": "bfs", "metric": {"name": "F1"}}')


# Each case runs under this wrapper: it marks (by a file) whether the model was loaded before the error.
MARK_LOADING = """
import os, runpy, sys
import specsparse.decoding.models as models
def marked(*args, _load=models.load_model, **kwargs):
    open(os.environ["LOAD_MARKER"], "w").close()
    return _load(*args, **kwargs)
models.load_model = marked
entry, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(entry, run_name="__main__") if entry.endswith(".py") else runpy.run_module(entry, run_name="__main__")
"""


def run_case(entry: str, args: list[str], folder: Path) -> subprocess.CompletedProcess:
    args = [a.replace("{tmp}", str(folder)) for a in args]
    command = [sys.executable, "-c", MARK_LOADING]
    outputs = [] if any(a.startswith("paths.outputs=") for a in args) else [f"paths.outputs={folder / 'out'}"]
    command += [str(ROOT / "run.py"), *args, *outputs] if entry == "run.py" else ["specsparse.cli", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1",
           "SPECSPARSE_CACHE": str(folder / "cache"), "LOAD_MARKER": str(folder / "model-loaded")}
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.parametrize(("entry", "args", "needle"), CASES, ids=[f"{i}-{needle}" for i, (_, _, needle) in enumerate(CASES)])
def test_bad_input_is_one_clear_line_and_writes_nothing(tmp_path, entry, args, needle):
    folder = tmp_path / "case"
    prepare(folder)
    damaged = (folder / "damaged.sqlite").read_bytes()
    done = run_case(entry, args, folder)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    problems = []
    if done.returncode != 2:
        problems.append(f"exit {done.returncode}")
    if len(lines) != 1 or "error:" not in lines[0] or needle not in lines[0]:
        problems.append(f"stderr {lines[-3:]!r}")
    if "Traceback" in done.stderr:
        problems.append("traceback")
    if (folder / "out" / "store.sqlite").exists():
        problems.append("wrote a results store")
    # A run folder may stay only as the record of a failed start (reproduce.json says "failed").
    for run in (folder / "out").glob("runs/*"):
        record = run / "reproduce.json"
        if not record.is_file() or json.loads(record.read_text()).get("status") != "failed":
            problems.append(f"left the run folder {run.name}")
    if (folder / "job" / "report").exists():
        problems.append("wrote a report")
    if (folder / "damaged.sqlite").read_bytes() != damaged:
        problems.append("changed the damaged store")
    if (folder / "model-loaded").exists() and needle not in AFTER_LOADING:
        problems.append("found only after the model loaded")
    assert not problems, f"{entry} {' '.join(args)}: {'; '.join(problems)}"
