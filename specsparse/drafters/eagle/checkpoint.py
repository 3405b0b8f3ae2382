"""EAGLE heads on disk, in the official checkpoint layouts: EAGLE-1/2 (`layers.0.*`, the target's LM
head) and EAGLE-3 (`midlayer.*`, its own LM head, a draft vocabulary as `d2t`/`t2d`), read from
safetensors or pytorch_model.bin in a directory or a Hub id, and written as safetensors with a
config.json that also names the layout and fused layers (the heads `specsparse train-drafter` makes).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import LlamaConfig

from specsparse.decoding.skipping import FINAL_HIDDEN
from specsparse.drafters.eagle.head import EagleHead, EagleLoadError, eagle3_feature_layers
from specsparse.util import atomic_write_text

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def save_eagle_head(head: EagleHead, directory: str | Path) -> None:
    """Safetensors weights and a config.json in the EAGLE layout's key names (`load_eagle_head`
    reads them back; d2t/t2d as EAGLE-3 stores its draft vocabulary)."""
    from safetensors.torch import save_file  # noqa: PLC0415

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().contiguous() for name, tensor in _to_checkpoint_keys(head).items()}
    partial = directory / "model.safetensors.partial"  # config.json, written last, marks a whole checkpoint
    save_file(state, str(partial))
    partial.replace(directory / "model.safetensors")
    config = head.config.to_dict()
    config.update(
        eagle_layout=head.layout, bias=head.fc.bias is not None, draft_vocab_size=head.draft_vocab_size,
        target_hidden_size=head.target_hidden_size,
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(head.feature_layers)},
    )
    atomic_write_text(directory / "config.json", json.dumps(config, indent=2, default=str))


def official_eagle3_config(directory: str | Path) -> dict:
    """The config.json official EAGLE-3 checkpoints carry (LlamaForCausalLMEagle3, draft_vocab_size,
    the fused layers under eagle_config) for a head this package saved; ValueError unless the folder
    holds an EAGLE-3 head in safetensors."""
    directory = Path(directory)
    if not (directory / "config.json").is_file() or not (directory / "model.safetensors").is_file():
        raise ValueError("no EAGLE checkpoint (config.json and model.safetensors) in this folder")
    config = json.loads((directory / "config.json").read_text())
    if config.get("eagle_layout") != "eagle3":
        raise ValueError("an EAGLE-1-layout head: train one with `specsparse train-drafter --arch eagle3`")
    for key in ("eagle_layout", "bias", "_name_or_path"):
        config.pop(key, None)
    config.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
                  tie_word_embeddings=False)
    return config


def _prefix(layout: str) -> str:
    return "layers.0." if layout == "eagle" else "midlayer."


def _to_checkpoint_keys(head: EagleHead) -> dict[str, torch.Tensor]:
    """The head's tensors under the official checkpoint names of its layout."""
    layer = _prefix(head.layout)
    state: dict[str, torch.Tensor] = {}
    for name, tensor in head.state_dict().items():
        if name.startswith("rotary_emb.") or name == "draft_to_target":
            continue
        if name.startswith(("self_attn.", "mlp.", "post_attention_layernorm.", "input_layernorm.", "hidden_norm.")):
            state[layer + name] = tensor
        else:
            state[name] = tensor
    if head.draft_to_target is not None:
        draft = head.draft_to_target
        state["d2t"] = draft - torch.arange(len(draft))
        t2d = torch.zeros(head.config.vocab_size, dtype=torch.bool)
        t2d[draft] = True
        state["t2d"] = t2d
    return state


def _read_state(directory: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        path = directory / name
        if path.is_file():
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file  # noqa: PLC0415

                return load_file(str(path))
            return torch.load(path, map_location="cpu", weights_only=True)
    raise EagleLoadError(f"no EAGLE weights in {directory}: expected one of {WEIGHT_FILES}")


def own_vocabulary(source: str) -> str | None:
    """Why the checkpoint at `source` drafts from a trimmed vocabulary of its own (a head trained
    trimmed, as official EAGLE-3 heads are), so that a searched one cannot replace it; None when it
    can (a full-vocabulary head of either layout), or when there is no checkpoint here yet. Reads
    config.json (a Hub id's too: as the load would fetch it, from the local cache offline) and tensor
    names only."""
    config = _checkpoint_config(source) or {}
    draft, full = config.get("draft_vocab_size"), config.get("vocab_size")
    if isinstance(draft, int) and isinstance(full, int) and draft < full:
        return f"{source} was trained with a trimmed vocabulary of its own (d2t: {draft} of {full} tokens)"
    directory = Path(source).expanduser()
    weights = next((directory / n for n in WEIGHT_FILES if (directory / n).is_file()), None)
    if not source or weights is None:
        return None
    if weights.suffix == ".safetensors":
        from safetensors import safe_open  # noqa: PLC0415

        with safe_open(str(weights), "pt") as file:
            keys = set(file.keys())
    else:
        keys = set(torch.load(weights, map_location="cpu", weights_only=True))
    if any(k.removeprefix("model.") == "d2t" for k in keys):
        return f"{source} was trained with a trimmed vocabulary of its own (d2t)"
    return None


def _checkpoint_config(source: str) -> dict | None:
    """config.json of a checkpoint folder, or of a Hub id (from the local Hub cache with HF_HUB_OFFLINE=1,
    else the Hub), without loading anything; None when there is none to read."""
    directory = Path(source).expanduser()
    if source and directory.is_dir():
        path = directory / "config.json"
    elif not source or directory.exists() or source.count("/") != 1:  # as `_resolve` tells a Hub id
        return None
    else:
        from huggingface_hub import hf_hub_download  # noqa: PLC0415

        try:
            path = Path(hf_hub_download(source, "config.json"))
        except Exception:  # noqa: BLE001 - not cached offline, no such repository, no network: the load says so
            return None
    try:
        config = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def trained_ids(source: str) -> set[str] | None:
    """The built-in example ids a head `specsparse train-drafter` (or a job's recipe) trained on, from
    its training.json; None for a head without that record (a Hub checkpoint, a prompt file's)."""
    path = Path(source).expanduser() / "training.json"
    try:
        ids = json.loads(path.read_text()).get("trained_ids") if source and path.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None
    return None if not isinstance(ids, list) else {str(i) for i in ids}


def _resolve(source: str) -> Path:
    """A local directory, or a Hub id from the local Hub cache (or the Hub, when online)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists() or source.count("/") != 1:
        raise EagleLoadError(f"EAGLE checkpoint {source!r} is not a directory: give drafter.path=<directory or Hub id>")
    from huggingface_hub import snapshot_download  # noqa: PLC0415

    try:
        return Path(snapshot_download(source, allow_patterns=["*.json", *WEIGHT_FILES]))
    except Exception as err:  # any Hub failure means "not available here"
        raise EagleLoadError(
            f"cannot fetch EAGLE checkpoint {source!r} ({str(err).splitlines()[0]}): download it into a local "
            "directory, or set HF_HUB_OFFLINE=0 where the Hub is reachable"
        ) from err


def load_eagle_head(source: str, target_config, num_target_layers: int) -> EagleHead:
    """Load an EAGLE (v1/v2) or EAGLE-3 head from a directory or Hub id for a target with this config.

    The layout comes from the weights (`midlayer.*` is EAGLE-3). EAGLE-3's fused layers come from
    config.json's eagle_config.eagle_aux_hidden_state_layer_ids, else the EAGLE-3 default."""
    directory = _resolve(source)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise EagleLoadError(f"no config.json in EAGLE checkpoint {directory}")
    raw = json.loads(config_path.read_text())
    state = {key.removeprefix("model."): tensor for key, tensor in _read_state(directory).items()}
    layout = raw.get("eagle_layout") or ("eagle3" if any(k.startswith("midlayer.") for k in state) else "eagle")
    layers = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if layout == "eagle":
        feature_layers = (FINAL_HIDDEN,)
    else:
        feature_layers = tuple(layers) if layers else eagle3_feature_layers(num_target_layers)
    bad = [i for i in feature_layers if i != FINAL_HIDDEN and not 0 <= i < num_target_layers]
    if bad:
        raise EagleLoadError(f"EAGLE checkpoint reads target layers {bad}, but the target has {num_target_layers}")
    known = {k: v for k, v in raw.items() if k not in ("eagle_layout", "eagle_config", "bias", "architectures")}
    config = LlamaConfig(**{**known, "num_hidden_layers": 1})
    if config.vocab_size != target_config.vocab_size:
        raise EagleLoadError(
            f"EAGLE checkpoint is for a {config.vocab_size}-token vocabulary, the target has "
            f"{target_config.vocab_size}: use a head trained for this target"
        )
    d2t = state.pop("d2t", None)
    state.pop("t2d", None)
    draft_to_target = None if d2t is None else d2t.long() + torch.arange(len(d2t))
    target_hidden = raw.get("target_hidden_size") or target_config.hidden_size
    if target_hidden != target_config.hidden_size:
        raise EagleLoadError(
            f"EAGLE checkpoint reads {target_hidden}-wide target features, the target's are "
            f"{target_config.hidden_size}: use a head trained for this target"
        )
    head = EagleHead(config, layout, feature_layers, target_hidden, fc_bias="fc.bias" in state,
                     draft_to_target=draft_to_target)
    prefix = _prefix(layout)
    renamed = {key.removeprefix(prefix): tensor for key, tensor in state.items()
               if (key.startswith(prefix) or not key.startswith(("layers.", "midlayer."))) and "rotary_emb" not in key}
    unused = ["embed_tokens.weight"]  # the target's embedding is used (EAGLE freezes it)
    if layout == "eagle":  # EAGLE-1's first layer runs without its input norm; the target's head is used
        unused += ["input_layernorm.weight", "norm.weight", "lm_head.weight"]
    for key in unused:
        renamed.pop(key, None)
    expected = {k for k in head.state_dict() if not k.startswith("rotary_emb.") and k != "draft_to_target"}
    missing, unexpected = expected - set(renamed), set(renamed) - expected
    if missing or unexpected:
        raise EagleLoadError(
            f"EAGLE checkpoint {directory} does not fit the {layout!r} layout: missing {sorted(missing)[:4]}, "
            f"unexpected {sorted(unexpected)[:4]}"
        )
    for key, tensor in renamed.items():
        if head.state_dict()[key].shape != tensor.shape:
            raise EagleLoadError(
                f"EAGLE checkpoint tensor {key} has shape {tuple(tensor.shape)}, expected "
                f"{tuple(head.state_dict()[key].shape)}: is it for this target?"
            )
    head.load_state_dict(renamed, strict=False)
    return head.eval()
