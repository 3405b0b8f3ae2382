"""Model loading: sources, offline errors, the GGUF conversion cache."""

import pytest
import torch

from specsparse.decoding.models import ModelLoadError, cache_dir, load_model, tiny_model


def test_missing_gguf_file_is_a_one_line_error(tmp_path):
    with pytest.raises(ModelLoadError, match="GGUF file not found") as err:
        load_model(str(tmp_path / "nope.gguf"))
    assert "\n" not in str(err.value)


def test_unknown_hub_id_fails_offline_with_a_fix(tmp_path):
    with pytest.raises(ModelLoadError, match="offline") as err:
        load_model(str(tmp_path / "no-such-model-dir"))
    assert "\n" not in str(err.value)


def test_unknown_dtype():
    with pytest.raises(ValueError, match="unknown dtype"):
        load_model("tiny", dtype="float8")


def test_tiny_tokenizer_round_trips_and_has_a_chat_template():
    tiny = tiny_model()
    text = "Grüße, world! 123"
    assert tiny.tokenizer.decode(tiny.tokenizer(text).input_ids) == text
    assert tiny.eos_token_ids == (tiny.tokenizer.eos_token_id,)
    assert "<|im_start|>assistant" in tiny.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )


def test_embedded_model_is_converted_once_and_identified(smollm):
    assert smollm.identity["name"] == "smollm2-135m" and smollm.identity["dtype"] == "float32"
    assert smollm.num_layers == 30 and smollm.model.config.vocab_size == 49152
    converted = list((cache_dir() / "converted").glob("SmolLM2-135M-Instruct*/model.safetensors"))
    assert converted, "the GGUF should have been converted to safetensors in the cache"
    again = load_model("smollm2-135m", dtype="bfloat16")
    assert again.identity["gguf_sha256"] == smollm.identity["gguf_sha256"]
    assert {p.dtype for p in again.model.parameters()} == {torch.bfloat16} and again.identity["dtype"] == "bfloat16"
