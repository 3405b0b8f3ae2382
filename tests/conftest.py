"""Shared fixtures. Tests never touch the network, and never write into the user's cache."""

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
}.items():
    os.environ[_name] = _value

import copy

import pytest
import torch
from hypothesis import strategies as st

from specsparse.drafters import (
    DraftModelDrafter,
    PromptLookupDrafter,
    SelfSkipDrafter,
    SuffixAutomatonDrafter,
    TokenRecyclingDrafter,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def tiny():
    """A tiny 4-layer Llama on the fast forward path (the CPU default; tests/test_forward_path.py
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
