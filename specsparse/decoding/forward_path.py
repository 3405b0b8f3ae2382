"""How a loaded model runs its linear maps: the forward path (`model.forward_path`).

eager: PyTorch's own `F.linear` on the weights as loaded.
fast (CPU): every linear map of the decoder layers, the LM head (and the rows of it a trimmed draft
    vocabulary keeps), and a drafter's own layers run as oneDNN matrix products on weights packed
    once, when the model loads, into the kernel's blocked layout (`mkldnn._reorder_linear_weight`,
    the packing inductor's `freezing` applies to CPU linear layers).
auto: fast for float32 on a CPU with oneDNN, eager elsewhere (other dtypes; GPUs, where cuBLAS needs
    no packing).

Why: decoding a small model on a CPU is bound by reading its weights, and a verification of k
tokens reads them once, as a one-token forward does. Eager PyTorch computes one token with a
matrix-vector kernel and k tokens with a matrix-matrix kernel that reads the weights as stored, and
on a 2-core CPU a 6-token forward costs 1.5-1.8x a one-token one. On weights packed for the kernel,
a 6-token forward costs about what a one-token forward does, and a one-token forward is faster too
(BENCHMARKS.md, "The fast forward path").

The fast path's outputs equal eager's up to float rounding (the tests compare them, and every
lossless-decoding invariant runs on the fast path); a near-tie can therefore go either way, so
measurements record the path that made them.

Everything else (attention, the KV cache, skip sets, token trees, batched rows) is unchanged: the
packed layers replace `nn.Linear` modules in place, so every caller of the model runs them.
"""

from __future__ import annotations

import logging
import time

import torch
from torch import nn

from specsparse.decoding.skipping import decoder_layers

log = logging.getLogger(__name__)

FORWARD_PATHS = ("auto", "eager", "fast")
_ATTRIBUTE = "_specsparse_forward_path"  # set on a model whose linear maps run on the fast path
ROW_HEADS_KEPT = 4  # trimmed heads kept per LM head (`head_rows`)


class ForwardPathError(ValueError):
    """A forward path that does not exist or cannot run on the device; the message names the fix."""


def resolve_forward_path(path: str, device: str, dtype: str) -> str:
    """`path` ("auto", "eager" or "fast") as it runs for a model of `dtype` (a name, as `load_model`
    takes it) on `device`: "eager" or "fast"."""
    if path not in FORWARD_PATHS:
        raise ForwardPathError(f"forward_path={path!r}: use one of {', '.join(FORWARD_PATHS)}")
    on_cpu = str(device).split(":", 1)[0] == "cpu"
    can_pack = on_cpu and dtype == "float32" and torch.backends.mkldnn.is_available()
    if path == "auto":
        return "fast" if can_pack else "eager"
    if path == "fast" and not can_pack:
        why = (f"device {device!r}" if not on_cpu else f"dtype {dtype}" if dtype != "float32"
               else "this PyTorch build, which has no oneDNN (mkldnn)")
        raise ForwardPathError(f"forward_path=fast packs float32 weights for oneDNN's CPU kernels, not for {why}: "
                               "use forward_path=eager or auto")
    return path


class PrepackedLinear(nn.Linear):
    """y = x W^T + b with W packed once into oneDNN's blocked layout (a frozen, inference-only layer).

    An `nn.Linear` to every caller that looks (shapes, `parameters()` counts); `weight` holds the
    packed tensor, and `weight.to_dense()` gives the original back exactly.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        nn.Module.__init__(self)
        self.out_features, self.in_features = weight.shape
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous())
        self.weight = nn.Parameter(packed, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def __deepcopy__(self, memo: dict) -> PrepackedLinear:  # packed tensors cannot be cloned: pack a copy
        copied = memo[id(self)] = PrepackedLinear(self.weight.to_dense(), self.bias)
        return copied


def linear_map(weight: torch.Tensor, fast: bool, bias: torch.Tensor | None = None) -> nn.Linear:
    """x -> x @ weight.T + bias as a frozen linear layer: packed on the fast path, else over `weight`
    itself (no copy). For heads built from rows of a model's LM head (trimmed vocabularies)."""
    if fast and weight.dtype == torch.float32 and weight.device.type == "cpu":
        return PrepackedLinear(weight, bias)
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    layer.weight = nn.Parameter(weight.detach(), requires_grad=False)
    if bias is not None:
        layer.bias = nn.Parameter(bias.detach(), requires_grad=False)
    return layer


def head_rows(layer: nn.Linear, ids: torch.Tensor, fast: bool) -> nn.Linear:
    """`layer` (an LM head) restricted to its output rows `ids` (a trimmed vocabulary), packed on the
    fast path; built once per id set and kept on `layer` (the last few), since every request's new
    drafter asks for the same rows."""
    cache = layer.__dict__.setdefault("_specsparse_rows", {})
    key = (fast, tuple(ids.tolist()))
    if key not in cache:
        if len(cache) >= ROW_HEADS_KEPT:
            cache.pop(next(iter(cache)))
        weight, rows = dense_weight(layer), ids.to(layer.weight.device)
        bias = None if layer.bias is None else layer.bias[rows].contiguous()
        cache[key] = linear_map(weight[rows].contiguous(), fast, bias)
    return cache[key]


def dense_weight(layer: nn.Linear) -> torch.Tensor:
    """A linear layer's weight [out, in] as a plain tensor, packed or not."""
    return layer.weight.to_dense() if layer.weight.is_mkldnn else layer.weight


def prepack_linears(module: nn.Module) -> int:
    """Replace every float32 CPU `nn.Linear` under `module` by its `PrepackedLinear`, in place; returns
    how many. The originals are dropped: the packed layer holds the only copy of each weight."""
    swaps = [(parent, name, child) for parent in module.modules() for name, child in parent._modules.items()
             if type(child) is nn.Linear and child.weight.dtype == torch.float32 and child.weight.device.type == "cpu"]
    for parent, name, child in swaps:
        parent._modules[name] = PrepackedLinear(child.weight, child.bias)
    return len(swaps)


def use_forward_path(model: nn.Module, path: str) -> None:
    """Put a loaded model on `path` ("eager" or "fast", as `resolve_forward_path` gives it), once, at
    load. Fast packs every linear map of its decoder layers and a copy of its LM head (which stays as
    it is where the input embedding shares its weight)."""
    if path == "fast":
        start = time.perf_counter()
        count = prepack_linears(decoder_layers(model))
        # In __dict__, not as a submodule: the model's parameters and state dict stay as loaded.
        head = model.get_output_embeddings()
        model.__dict__[_ATTRIBUTE] = PrepackedLinear(head.weight, head.bias)
        log.info("fast forward path: %d linear maps and the LM head packed for oneDNN in %.1f s",
                 count, time.perf_counter() - start)


def is_fast(model: nn.Module) -> bool:
    """Whether `model` runs on the fast path (`use_forward_path`)."""
    return _ATTRIBUTE in model.__dict__


def forward_path_of(model: nn.Module) -> str:
    return "fast" if is_fast(model) else "eager"


def lm_head(model: nn.Module) -> nn.Module:
    """The model's LM head as it runs on its forward path (hidden [..., h] -> logits [..., vocab])."""
    packed = model.__dict__.get(_ATTRIBUTE)
    return model.get_output_embeddings() if packed is None else packed
