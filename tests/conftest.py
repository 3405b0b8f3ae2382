"""Fixtures and helpers the test rooms share (tests/<package>/ for each package of specsparse; the
whole-project checks at the top). Tests never touch the network, and never write into the user's cache."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

# A per-session cache (set before specsparse is imported): cost profiles timed by tests, on a busy
# machine and tiny models, never reach the user's searches. The embedded models' GGUF conversions
# (slow to make, and large) live in a test-only folder that sessions share instead.
_CACHE = tempfile.mkdtemp(prefix="specsparse-test-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
_MODELS = Path(tempfile.gettempdir()) / f"specsparse-test-models-{os.getuid()}"
for _part in ("converted", "gguf"):
    (_MODELS / _part).mkdir(parents=True, exist_ok=True)
    (Path(_CACHE) / _part).symlink_to(_MODELS / _part, target_is_directory=True)

for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "TOKENIZERS_PARALLELISM": "false",
    "SPECSPARSE_CACHE": _CACHE,
    "HF_DATASETS_CACHE": os.path.join(_CACHE, "datasets"),  # what `datasets` builds from local files
}.items():
    os.environ[_name] = _value

import copy
import json
import struct
from dataclasses import replace

import pytest
import torch
from hydra import compose, initialize_config_dir
from hypothesis import strategies as st
from omegaconf import OmegaConf

from specsparse.decoding.lean_kernels import find_compiler
from specsparse.decoding.skipping import skipper_for
from specsparse.drafters import (
    DraftModelDrafter,
    PromptLookupDrafter,
    SelfSkipDrafter,
    SuffixAutomatonDrafter,
    TokenRecyclingDrafter,
)
from specsparse.jobs.config import JobPlan, build_plan
from specsparse.search import TSSRule
from specsparse.study.driver import evaluate_callable, run_search
from specsparse.types import Candidate

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# The lean step's native kernels need a C++ compiler; without one they are skipped (a compiler that is
# there but fails to build them is a failure, not a skip).
HAS_COMPILER = find_compiler() is not None
NEEDS_COMPILER = pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler here to build the lean step's kernels")


@pytest.fixture(scope="session")
def tiny():
    """A tiny 4-layer Llama on the fast forward path (the CPU default; tests/decoding/test_forward_path.py
    compares it with eager)."""
    from specsparse.decoding.forward_path import use_forward_path
    from specsparse.decoding.models import tiny_model

    loaded = tiny_model(num_layers=4, hidden_size=64, seed=0)
    use_forward_path(loaded.model, "fast")
    return loaded


@pytest.fixture(scope="session")
def models():
    """Two tiny 4-layer Llamas (seeds 0 and 1: a target and an independent draft model) for engine
    tests, on the fast forward path."""
    from specsparse.decoding.forward_path import use_forward_path
    from specsparse.decoding.models import tiny_model

    loaded = {seed: tiny_model(num_layers=4, hidden_size=48, seed=seed).model for seed in (0, 1)}
    for model in loaded.values():
        use_forward_path(model, "fast")
    return loaded


@pytest.fixture(scope="session")
def smollm():
    """The embedded default model in float32 (skips when its package is not installed)."""
    from specsparse.decoding.models import ModelLoadError, load_model

    try:
        return load_model("smollm2-135m", dtype="float32")
    except ModelLoadError as err:
        pytest.skip(f"embedded model unavailable: {err}")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data not found at {SHARED_DATA} (only present next to a CI checkout)")
    return SHARED_DATA


# One thread: tiny models are faster so, and a loaded machine's oversubscribed threads stall badly.
torch.set_num_threads(1)


# -- helpers shared by test modules (import them with `from conftest import ...`) --------------------
NUM_LAYERS = 4  # depth of the tiny random models the property tests use


def skip_sets(num_layers):
    """Every proper subset of the layers (skipping all of them is an error)."""
    return st.sets(st.integers(0, num_layers - 1), max_size=num_layers - 1).map(lambda s: tuple(sorted(s)))


def physically_removed(model, skip):
    """A copy of `model` without the `skip` layers, re-indexed 0..n-1, with its own config."""
    pruned = copy.deepcopy(model)
    kept = [layer for i, layer in enumerate(pruned.model.layers) if i not in set(skip)]
    for new_index, layer in enumerate(kept):
        layer.self_attn.layer_idx = new_index
    pruned.model.layers = torch.nn.ModuleList(kept)
    pruned.config.num_hidden_layers = len(kept)
    if getattr(pruned.config, "layer_types", None):
        pruned.config.layer_types = [t for i, t in enumerate(pruned.config.layer_types) if i not in set(skip)]
    return pruned


def make_drafter(name, models, num_layers, draft_skip):
    target = models[0]
    vocab = target.config.vocab_size
    return {
        "pld": lambda: PromptLookupDrafter(),
        "pld_tree": lambda: PromptLookupDrafter(branches=3),
        "samd": lambda: SuffixAutomatonDrafter(min_match=2, fallback=TokenRecyclingDrafter(vocab)),
        "samd_tree": lambda: SuffixAutomatonDrafter(min_match=2, fallback=TokenRecyclingDrafter(vocab, tree=(3, 2))),
        "recycling": lambda: TokenRecyclingDrafter(vocab),
        "recycling_tree": lambda: TokenRecyclingDrafter(vocab, tree=(4, 2, 2)),
        "self_skip": lambda: SelfSkipDrafter(target, skip_layers=draft_skip),
        "draft_model": lambda: DraftModelDrafter(models[1], target_vocab_size=vocab),
        "draft_model_trimmed": lambda: DraftModelDrafter(models[1], vocab_ids=range(0, vocab, 3)),
    }[name]()


DRAFTERS = ["pld", "samd", "recycling", "self_skip", "draft_model", "draft_model_trimmed"]
TREE_DRAFTERS = ["pld_tree", "samd_tree", "recycling_tree"]  # greedy only


@pytest.fixture
def embedded_models_installed(monkeypatch):
    """Config validation as on a machine with every embedded model's package (gemma3-270m's is not
    installed here): the tests that use it check configurations, not this machine's installs
    (tests/test_extras.py checks the error for a missing one)."""
    monkeypatch.setattr("specsparse.jobs.model_checks.embedded_package", lambda name: None)


# -- a job's plan, composed as run.py composes it (nothing runs) ------------------------------------
ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def composed(overrides: list[str] = ()) -> dict:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)


def plan_for(overrides: list[str], tmp_path: Path) -> JobPlan:
    return build_plan(composed(overrides), output_dir=tmp_path / "job", cwd=tmp_path)


# -- decoding without a cache, the reference every fast path is held to ------------------------------
def reference_greedy(model, prompt, skip, max_new_tokens):
    """Greedy decoding with no KV cache at all: re-run the whole sequence for every token.

    Returns the tokens and, per step, the gap between the two best logits (to recognise near-ties).
    """
    tokens, gaps = list(prompt), []
    skipper = skipper_for(model)
    with torch.inference_mode(), skipper.skipping(tuple(sorted(skip))):
        for _ in range(max_new_tokens):
            logits = model(input_ids=torch.tensor([tokens]), use_cache=False).logits[0, -1].float()
            top2 = logits.topk(2).values
            gaps.append(float(top2[0] - top2[1]))
            tokens.append(int(logits.argmax()))
    return tokens[len(prompt) :], gaps


def assert_same_up_to_near_tie(output, reference, gaps):
    """Token-for-token equal; a divergence is only tolerated at a genuine float near-tie."""
    for i, (ours, ref) in enumerate(zip(output, reference)):
        if ours != ref:
            assert gaps[i] < 1e-4, f"diverged at token {i} ({ours} != {ref}) with top-2 logit gap {gaps[i]:.2e}"
            return
    assert len(output) == len(reference)


# -- synthetic search objectives with known optima (no model) -----------------------------------------
def additive(num_layers, accept_drop, metric_drop, saving, a0=3.0, m0=0.8, default=(0.2, 0.05, 0.1)):
    """A(S) = a0 - sum drops, M(S) = m0 - sum drops, cost(S) = 1 - sum savings (separable)."""

    def fn(c: Candidate):
        da = sum(accept_drop.get(i, default[0]) for i in c.skip_layers)
        dm = sum(metric_drop.get(i, default[1]) for i in c.skip_layers)
        ds = sum(saving.get(i, default[2]) for i in c.skip_layers)
        return a0 - da, (None if m0 is None else m0 - dm), 1.0 - ds

    fn.num_layers = num_layers
    return fn


# Greedy trap: layer 0 alone is the best single step (score 0.1033 vs 0.0883 for 3 or 7), but after it
# nothing fits the 0.15 accept-drop allowance; {3, 7} (drop 0.14, cost 0.80) is the optimum.
# Other layers drop A by 0.2 (infeasible alone) and M by 0 (so the permissive pool keeps them).
TRAP = additive(10, {0: 0.10, 3: 0.07, 7: 0.07}, {}, {0: 0.12, 3: 0.10, 7: 0.10}, default=(0.2, 0.0, 0.1))
TRAP_OPTIMUM = Candidate((3, 7))


class Counted:
    """Wraps an objective and records every call (order and multiplicity)."""

    def __init__(self, fn):
        self.fn = fn
        self.calls: list[Candidate] = []

    def __call__(self, c: Candidate):
        self.calls.append(c)
        return self.fn(c)


def papers(**settings) -> TSSRule:
    """The papers' rule (point estimates, the task metric as the quality check) with `settings`: the
    synthetic measurements here carry no per-prompt results to bound intervals or compare replies."""
    return TSSRule(**{"feasibility": "point", "guard": "task", **settings})


def search_on(strategy, fn, key=None, meta=None, **kw):
    """Run `strategy` on the synthetic objective `fn` through the driver, without a progress bar (a
    store's `key` and `meta` of each candidate where given)."""
    measurer = evaluate_callable(fn)
    measurer = replace(measurer, **{name: f for name, f in (("key", key), ("meta", meta)) if f is not None})
    return run_search(strategy, measurer, progress=False, **kw)


# -- W&B's offline run files --------------------------------------------------------------------------
def wandb_records(run_file: Path) -> list:
    """The protobuf records of a .wandb file (a LevelDB-style log of 32 KiB blocks after a 7-byte
    header; each chunk has a 7-byte header: crc32, length, type)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, pending, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:  # zero padding up to the end of the block
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
    out = []
    for raw in records:
        record = pb.Record()
        record.ParseFromString(raw)
        out.append(record)
    return out



# -- the benchmark domains' data, in their sources' formats (made-up rows) ---------------------------------
def write_jsonl(file: Path, rows: list) -> Path:
    file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return file


def write_bfcl_folder(folder: Path, n: int) -> Path:
    """A BFCL v4 data folder in bfcl-eval's layout: n simple_python and n multiple questions."""
    (folder / "possible_answer").mkdir(parents=True, exist_ok=True)
    for category in ("simple_python", "multiple"):
        schema = {"name": "math.square", "description": "x squared",
                  "parameters": {"type": "dict", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}
        write_jsonl(folder / f"BFCL_v4_{category}.json", [
            {"id": f"{category}_{i}", "question": [[{"role": "user", "content": f"Square {i}."}]], "function": [schema]}
            for i in range(n)])
        write_jsonl(folder / "possible_answer" / f"BFCL_v4_{category}.json",
                    [{"id": f"{category}_{i}", "ground_truth": [{"math.square": {"x": [i]}}]} for i in range(n)])
    return folder


# Rows of n examples in the Hub's formats: HuggingFaceH4/MATH-500, HuggingFaceH4/aime_2024, eriktks/conll2003
# (the last sentence without entities).
HUB_ROWS = {
    "math500": lambda n: [{"problem": f"What is {i}/2?", "answer": rf"\frac{{{i}}}{{2}}", "unique_id": f"test/{i}.json"}
                          for i in range(n)],
    "aime": lambda n: [{"id": i, "problem": f"Find {i} + 1.", "answer": str(i + 1), "year": "2024"} for i in range(n)],
    "ner": lambda n: [{"id": str(i), "tokens": ["Peter", "Blackburn", "visited", f"Paris{i}", "."], "ner_tags": [1, 2, 0, 5, 0]}
                      for i in range(n - 1)] + [{"id": str(n - 1), "tokens": ["Nothing", "here"], "ner_tags": [0, 0]}],
}
