"""Benchmark scripts end to end on the tiny random model (no network; writes only under tmp_path)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_script(name):
    """scripts/<name>.py as a module (registered first: its dataclasses look their module up)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


# Three categories (two of them one domain's), more questions than are drawn, ids out of order.
QUESTIONS = [
    {"question_id": 162, "category": "translation", "turns": ["Translate German to English: Guten Morgen, wie geht es?"]},
    {"question_id": 161, "category": "translation", "turns": ["Translate German to English: Das Haus ist alt und gross."]},
    {"question_id": 81, "category": "writing", "turns": ["Write a short poem about the sea.", "Now make it rhyme."]},
    {"question_id": 82, "category": "writing", "turns": ["Write a haiku about rain.", "Translate it to French."]},
    {"question_id": 91, "category": "roleplay", "turns": ["Pretend to be a pirate and greet me.", "Say goodbye."]},
]


def test_bench_engine_spec_bench_mode_keeps_per_prompt_timings_and_intervals(tmp_path):
    questions = tmp_path / "question.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    output = tmp_path / "out" / "bench.json"
    env = os.environ | {"HF_HUB_OFFLINE": "1", "SPECSPARSE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_engine.py"), "--model", "tiny", "--spec-bench", str(questions),
         "--per-category", "1", "--max-new-tokens", "8", "--repeats", "1", "--skip", "1", "--self-skip", "1-2",
         "--output", str(output)],
        cwd=tmp_path, env=env, check=True, capture_output=True, text=True, timeout=300,
    )
    result = json.loads(output.read_text())

    prompts = result["prompts"]
    assert [p["category"] for p in prompts] == ["writing", "roleplay", "translation"]  # file order of categories
    assert {p["question_id"] for p in prompts} <= {q["question_id"] for q in QUESTIONS}
    assert all(p["id"] == f"spec_bench-{p['category']}-{p['question_id']}" for p in prompts)
    assert {"hf_greedy", "hf_prompt_lookup", "ours_dense", "ours_pld", "ours_pld_adaptive", "ours_samd"} <= set(result["timings"])
    for name, timing in result["timings"].items():
        assert len(timing["new_tokens"]) == len(timing["seconds"]) == len(prompts), name
        assert all(len(per_repeat) == 1 and per_repeat[0] > 0 for per_repeat in timing["seconds"]), name
        assert all(0 < per_repeat[0] <= 8 for per_repeat in timing["new_tokens"]), name
        assert all(len(per_repeat) == 1 and per_repeat[0] > 0 for per_repeat in timing["cpu_seconds"]), name
    assert result["timings"]["hf_greedy"]["forward_seconds"] is None
    assert "ours_pld_adaptive / hf_prompt_lookup" in result["ratios"]
    for name, ratio in result["ratios"].items():
        for interval in (ratio, ratio.get("cpu", ratio)):  # over wall seconds and over CPU seconds
            assert 0 < interval["low"] <= interval["point"] <= interval["high"], name
    assert len(result["identical"]["ours_pld"]) == len(prompts)
    markdown = output.with_suffix(".md").read_text()
    for p in prompts:
        assert f"- {p['category']}: {p['question_id']}" in markdown
    written = [path.name for path in tmp_path.rglob("*") if path.is_file() and not path.is_relative_to(tmp_path / "cache")]
    assert sorted(written) == ["bench.json", "bench.md", "question.jsonl"]  # beside its own cache (the lean step's kernels)


def test_bench_engine_draws_per_category_by_seed(tmp_path):
    from specsparse.decoding.models import tiny_tokenizer

    bench = load_script("bench_engine")
    rows = [{"question_id": 400 + i, "category": "qa", "turns": [f"question {i}?"]} for i in range(10)]
    questions = tmp_path / "question.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS + rows))

    def draw(seed, categories=None):
        return [p.id for p in bench.spec_bench_prompts(tiny_tokenizer(), str(questions), 2, seed, categories)]

    first = draw(0)
    assert first == draw(0)
    assert [i.split("-")[1] for i in first] == ["writing", "writing", "roleplay", "translation", "translation", "qa", "qa"]
    qa = [int(i.rsplit("-", 1)[1]) for i in first if "-qa-" in i]
    assert qa == sorted(qa)
    assert {tuple(draw(seed)) for seed in range(5)} != {tuple(first)}  # the seed changes the draw
    assert draw(0, ["qa"]) == [i for i in first if "-qa-" in i]  # a category's draw ignores the others
    with pytest.raises(SystemExit):
        draw(0, ["rag"])


def test_bench_engine_resumes_an_interrupted_run_without_rerunning_its_prompts(tmp_path):
    bench = load_script("bench_engine")
    prompts = [bench.Prompt(f"spec_bench-qa-{i}", "qa", i, (1, 2, i)) for i in range(3)]
    calls = []

    def method(name, fail_on=None):
        def run(ids):
            calls.append((name, ids[-1]))
            if ids[-1] == fail_on:
                raise KeyboardInterrupt
            ours = name.startswith("ours")
            return bench.Run([ids[-1]] * 2, 0.5, [2] if ours else None, 0.4 if ours else None)
        return run

    checkpoint, settings = tmp_path / "bench.runs.json", {"k": 5}
    with pytest.raises(KeyboardInterrupt):
        bench.run_all({"hf": method("hf", fail_on=2), "ours": method("ours")}, prompts, 1, checkpoint, settings)
    calls.clear()
    runs = bench.run_all({"hf": method("hf"), "ours": method("ours")}, prompts, 1, checkpoint, settings, resume=True)
    assert calls == [("hf", 0), ("ours", 0), ("hf", 2), ("ours", 2)]  # the warm-up, then only the missing prompt
    assert [per_method["hf"].tokens for per_method in runs[0]] == [[0, 0], [1, 1], [2, 2]]
    timings = bench.timings_of(runs)
    assert timings["hf"]["forward_seconds"] is None and timings["ours"]["seconds"].shape == (3, 1)
    with pytest.raises(SystemExit):  # a checkpoint of other settings is not mixed in
        bench.run_all({"hf": method("hf"), "ours": method("ours")}, prompts, 1, checkpoint, {"k": 4}, resume=True)


def test_bench_drafters_compares_variants_side_by_side_and_checks_replies(tmp_path):
    env = os.environ | {"HF_HUB_OFFLINE": "1", "SPECSPARSE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_drafters.py"), "--model", "tiny", "--domains", "qa",
         "--limit", "10", "--max-new-tokens", "6", "--variants", "0,1,3,7"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=True,
    )
    rows = [line for line in done.stdout.splitlines() if line.startswith("| qa |")]
    assert len(rows) == 4 and all(row.split("|")[6].strip() == "yes" for row in rows)  # every reply = greedy
    assert "| qa | samd, context only | 8 |" in rows[0] and "1.000 [1.000-1.000]" in rows[0]


@pytest.mark.parametrize("arch", ["eagle", "eagle3"])
def test_profile_draft_step_splits_propose_time_at_each_vocabulary(tmp_path, arch):
    run_script(tmp_path, "profile_draft_step", "--model", "tiny", "--arch", arch, "--vocab-sizes", "full,10",
               "--threads", "1", "--repeats", "2", "--json", "rows.json")
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [row["vocab"] for row in rows] == [259, 10]  # the tiny model's full vocabulary, then 10 rows
    assert all(row["propose_ms"] > 0 and 0 <= row["other_share"] <= 1 and row["forward_ms"] > 0 for row in rows)


@pytest.mark.slow
def test_bench_ray_measures_one_sweep_locally_and_on_ray_with_the_same_results(tmp_path):
    run_script(tmp_path, "bench_ray", "--model", "tiny", "--measurements", "2", "--workers", "1", "--local-threads", "1",
               "--json", "ray.json", timeout=500)
    numbers = json.loads((tmp_path / "ray.json").read_text())
    assert numbers["same_accept_and_metric"] is True and numbers["measurements"] == 2
    assert numbers["ray_batch_s"] > 0 and numbers["local_1_threads_s"] > 0


def script_env(tmp_path: Path) -> dict:
    """Offline, one thread, caches under tmp_path."""
    return os.environ | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1",
                         "WANDB_MODE": "offline", "SPECSPARSE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
                         "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}


def run_script(tmp_path: Path, name: str, *args: str, timeout: int = 300) -> str:
    """scripts/<name>.py run in tmp_path (`script_env`); its stdout."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / f"{name}.py"), *args], cwd=tmp_path,
                          env=script_env(tmp_path), capture_output=True, text=True, timeout=timeout, check=True)
    return done.stdout


# Every script at the tiny model's size (those tested above apart), so none can break unnoticed:
# (script, arguments, a line its output must hold).
SMOKE = [
    ("bench_measure", ["--model", "tiny", "--prompts", "2", "--max-new-tokens", "6", "--skip-sets", "2", "--threads", "1",
                       "--profile-repeats", "0", "--out", "bench_measure.json"], "wrote bench_measure.json"),
    ("bench_store", ["--rows", "200", "--prompts", "3", "--repeats", "1"], "200 measurements x 3 prompts"),
    ("domain_baselines", ["--model", "tiny", "--domains", "qa", "--drafters", "pld", "--limit", "6", "--max-new-tokens", "6",
                          "--store", "store.sqlite"], "| qa | builtin | pld |"),
    ("routing_accuracy", [], "| tfidf | built-in calibration | built-in test split |"),
    ("bench_batch_size", ["--model", "tiny", "--prompts", "16", "--max-new-tokens", "4"], "| 64 |"),
    ("bench_speedup", ["--model", "tiny", "--domains", "qa", "--drafters", "pld", "--prompts", "2",
                       "--override", "generation.max_new_tokens=6", "--output", "speedup.json"], "| pld fast |"),
    ("bench_cost_model", ["--model", "tiny", "--domain", "qa", "--drafter", "pld", "--skip", "1", "--prompts", "2",
                          "--repeats", "1", "--override", "generation.max_new_tokens=6", "--output", "cost.json"],
     "| skip[1] |"),
    ("bench_forward_path", ["--model", "tiny", "--repeats", "2", "--bandwidth-mb", "64", "--output", "fp.json"],
     "| float32 fast, lean step | 6 |"),
]


@pytest.mark.parametrize(("name", "args", "expected"), SMOKE, ids=[s[0] for s in SMOKE])
def test_script_runs_at_tiny_size(tmp_path, name, args, expected):
    assert expected in run_script(tmp_path, name, *args)


def test_bench_eagle_times_a_head_trained_here_and_checks_every_reply(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Say hello."}\n{"prompt": "Count to three."}\n')
    subprocess.run([sys.executable, "-m", "specsparse.cli", "train-drafter", "--model", "tiny", "--output", "head",
                    "--prompts", str(prompts), "--max-new-tokens", "6", "--epochs", "1", "--threads", "1"],
                   cwd=tmp_path, env=script_env(tmp_path), capture_output=True, text=True, timeout=300, check=True)
    run_script(tmp_path, "bench_eagle", "--model", "tiny", "--head", "head", "--per-domain", "1", "--max-new-tokens", "6",
               "--k", "2", "--tree", "2", "4", "--json", "rows.json")
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {"dense", "pld", "samd"} <= {row["method"] for row in rows}
    assert all(row["mismatches"] == 0 for row in rows)  # every reply equals the dense target's


@pytest.mark.slow
def test_bench_dtype_compile_runs_every_variant_at_tiny_size(tmp_path):
    out = run_script(tmp_path, "bench_dtype_compile", "--model", "tiny", "--prompts", "1", "--max-new-tokens", "4",
                     "--repeats", "1", "--threads", "1", timeout=500)
    assert "| float32_compiled | pld |" in out and "| bfloat16 | plain |" in out


@pytest.mark.slow
def test_feasibility_rules_replays_a_point_rule_sweep_from_its_store(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "run.py"), "-m", "model=tiny", "logger=none", "progress=false",
                    "domain=qa", "domain.limit=10", "search=bfs", "tss.feasibility=point", "tss.max_depth=2",
                    "generation.max_new_tokens=6", "timing_prompts=2", f"paths.outputs={tmp_path}",
                    f"paths.store={tmp_path / 'store.sqlite'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                   cwd=tmp_path, env=script_env(tmp_path), capture_output=True, text=True, timeout=500, check=True)
    out = run_script(tmp_path, "feasibility_rules", str(tmp_path / "sweep"))
    row = next(line for line in out.splitlines() if line.startswith("| qa |"))
    assert row.rstrip().endswith("|") and row.split("|")[2].strip()  # the point rule's pick is named
