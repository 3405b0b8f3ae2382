"""Shared fixtures. Tests never touch the network."""

import os

for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ[_name] = _value

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def tiny():
    from specsparse.models import tiny_model

    return tiny_model(num_layers=4, hidden_size=64, seed=0)


@pytest.fixture(scope="session")
def models():
    """Two tiny 4-layer Llamas (seeds 0 and 1: a target and an independent draft model) for engine tests."""
    from specsparse.models import tiny_model

    return {seed: tiny_model(num_layers=4, hidden_size=48, seed=seed).model for seed in (0, 1)}


@pytest.fixture(scope="session")
def smollm():
    """The embedded default model in float32 (skips when its package is not installed)."""
    from specsparse.models import ModelLoadError, load_model

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
