"""How a loaded model runs its linear maps: the forward path (`model.forward_path`).

eager: PyTorch's own `F.linear` on the weights as loaded.
fast (CPU): every linear map of the decoder layers, the LM head (and the rows of it a trimmed draft
    vocabulary keeps), and a drafter's own layers run as oneDNN matrix products on weights packed
    once, when the model loads, into the kernel's blocked layout (`mkldnn._reorder_linear_weight`,
    the packing inductor's `freezing` applies to CPU linear layers); decoders of the Llama family run
    single sequences through the lean decode step (`lean_step.py`). float32, and bfloat16 where the
    CPU has bfloat16 instructions (oneDNN then multiplies on AVX-512 BF16 / AMX).
auto: fast for float32 and (where the CPU has them) bfloat16 on a CPU with oneDNN, eager elsewhere
    (float16; GPUs, where cuBLAS needs no packing).

Why: decoding a small model on a CPU is bound by reading its weights, and a verification of k
tokens reads them once, as a one-token forward does. Eager PyTorch computes one token with a
matrix-vector kernel and k tokens with a matrix-matrix kernel that reads the weights as stored, and
on a 2-core CPU a 6-token forward costs 1.5-1.8x a one-token one. On weights packed for the kernel,
a 6-token forward costs about what a one-token forward does, and a one-token forward is faster too
(BENCHMARKS.md, "The fast forward path").

The fast path's outputs equal eager's up to float rounding (the tests compare them, and every
lossless-decoding invariant runs on the fast path); a near-tie can therefore go either way, so
measurements record the path that made them. In bfloat16, attention over several queries rounds
differently from one query at a time (the packed bfloat16 products themselves give every row the same
result at any row count): the lean step attends one query at a time in a verification, so there a
bfloat16 verification equals one-token decoding bit for bit (`lean_step.py`); HF's modules do not.

Memory: the checkpoint is memory-mapped (`models.load_model`) and packed one decoder layer at a time;
once a layer's packed copies exist, the file pages of its original weights are dropped from the
process's memory (`release_file_pages`: they stay in the file, and a later read of a weight still in
use, such as the input embedding, faults its pages back in), so a packed copy never sits beside its
original and the peak stays near eager's.

Maps that read one input are packed as one product (`FusedProjection`): q/k/v of attention and
gate/up of the MLP. Each map's module becomes a `FusedPart`, a slice of the shared product computed
once per input, so HF's modules, batched rows and the lean decode step (`lean_step.py`) read one
packed weight. Everything else (attention, the KV cache, skip sets, token trees, batched rows) is
unchanged: the packed layers replace `nn.Linear` modules in place, so every caller of the model runs
them.
"""

from __future__ import annotations

import copy
import ctypes
import logging
import mmap
import sys
import time
from collections.abc import Iterable

import torch
from torch import nn

from specsparse.decoding.skipping import decoder_layers

log = logging.getLogger(__name__)

FORWARD_PATHS = ("auto", "eager", "fast")
_ATTRIBUTE = "_specsparse_forward_path"  # set on a model whose linear maps run on the fast path
ROW_HEADS_KEPT = 4  # trimmed heads kept per LM head (`head_rows`)
PACKED_DTYPES = (torch.float32, torch.bfloat16)


class ForwardPathError(ValueError):
    """A forward path that does not exist or cannot run on the device; the message names the fix."""


def resolve_forward_path(path: str, device: str, dtype: str) -> str:
    """`path` ("auto", "eager" or "fast") as it runs for a model of `dtype` (a name, as `load_model`
    takes it) on `device`: "eager" or "fast"."""
    if path not in FORWARD_PATHS:
        raise ForwardPathError(f"forward_path={path!r}: use one of {', '.join(FORWARD_PATHS)}")
    on_cpu = str(device).split(":", 1)[0] == "cpu"
    has_onednn = torch.backends.mkldnn.is_available()
    dtype_packs = dtype == "float32" or (dtype == "bfloat16" and has_onednn and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    can_pack = on_cpu and has_onednn and dtype_packs
    if path == "auto":
        return "fast" if can_pack else "eager"
    if path == "fast" and not can_pack:
        why = (f"device {device!r}" if not on_cpu else "this PyTorch build, which has no oneDNN (mkldnn)"
               if not has_onednn else f"dtype {dtype}" + (" on this CPU, which has no bfloat16 instructions"
                                                          if dtype == "bfloat16" else ""))
        raise ForwardPathError(f"forward_path=fast packs float32 or bfloat16 weights for oneDNN's CPU kernels, "
                               f"not for {why}: use forward_path=eager or auto")
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
    if fast and weight.dtype in PACKED_DTYPES and weight.device.type == "cpu":
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


class FusedProjection:
    """Linear maps of one input packed as one product [x W1^T | x W2^T | ...] (q/k/v, gate/up).

    `__call__` gives the whole product (the lean step splits it); each map's `FusedPart` takes its
    slice, the product computed once per input: the parts of one projection are called back to back
    on the same tensor (HF's attention and MLP do), and the product is kept until every part took its
    slice. The packed weight is a parameter of the first part only, so parameter counts are unchanged.
    """

    def __init__(self, linears: list[nn.Linear]):
        biases = [layer.bias for layer in linears]
        bias = None if all(b is None for b in biases) else torch.cat(
            [torch.zeros(layer.out_features, dtype=layer.weight.dtype) if b is None else b.detach()
             for layer, b in zip(linears, biases)])
        self.linear = PrepackedLinear(torch.cat([dense_weight(layer) for layer in linears]), bias)
        bounds = [0]
        for layer in linears:
            bounds.append(bounds[-1] + layer.out_features)
        self.slices = [slice(start, stop) for start, stop in zip(bounds, bounds[1:])]
        self._input: torch.Tensor | None = None
        self._output: torch.Tensor | None = None
        self._untaken: set[int] = set()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        if x is not self._input or index not in self._untaken:
            self._input, self._output, self._untaken = x, self.linear(x), set(range(len(self.slices)))
        self._untaken.discard(index)
        output = self._output
        if not self._untaken:
            self._input = self._output = None
        return output[..., self.slices[index]]

    def parts(self) -> list[FusedPart]:
        return [FusedPart(self, index) for index in range(len(self.slices))]

    def __deepcopy__(self, memo: dict) -> FusedProjection:  # a copy packs its own weight
        copied = memo[id(self)] = copy.copy(self)
        copied.linear = copy.deepcopy(self.linear, memo)
        copied._input = copied._output = None
        copied._untaken = set()
        return copied


class FusedPart(nn.Module):
    """One linear map of a `FusedProjection`, in place of its `nn.Linear` (its slice of the product)."""

    def __init__(self, projection: FusedProjection, index: int):
        super().__init__()
        self.projection = projection
        self.index = index
        self.in_features = projection.linear.in_features
        self.out_features = projection.slices[index].stop - projection.slices[index].start
        if index == 0:  # the shared packed weight, counted once
            self.weight = projection.linear.weight
            self.bias = projection.linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection.part(x, self.index)

    def __deepcopy__(self, memo: dict) -> FusedPart:
        copied = memo[id(self)] = FusedPart(copy.deepcopy(self.projection, memo), self.index)
        return copied


LINEAR_MAPS = (nn.Linear, FusedPart)  # the modules that are linear maps on either path

FUSED_MAPS = (("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj")))


def fuse_projections(layer: nn.Module) -> dict[str, FusedProjection]:
    """Pack the maps of `FUSED_MAPS` that `layer` (a decoder layer) has as one product each, in place;
    returns the projections by block name ("self_attn", "mlp")."""
    fused = {}
    for block_name, names in FUSED_MAPS:
        block = getattr(layer, block_name, None)
        linears = [getattr(block, name, None) for name in names]
        if block is None or not all(isinstance(m, nn.Linear) and m.weight.dtype in PACKED_DTYPES for m in linears):
            continue
        projection = fused[block_name] = FusedProjection(linears)
        for name, part in zip(names, projection.parts()):
            block._modules[name] = part
    return fused


def prepack_linears(module: nn.Module) -> int:
    """Replace every float32 or bfloat16 CPU `nn.Linear` under `module` by its `PrepackedLinear`, in place;
    returns how many. The originals are dropped: the packed layer holds the only copy of each weight."""
    swaps = [(parent, name, child) for parent in module.modules() for name, child in parent._modules.items()
             if type(child) is nn.Linear and child.weight.dtype in PACKED_DTYPES and child.weight.device.type == "cpu"]
    for parent, name, child in swaps:
        parent._modules[name] = PrepackedLinear(child.weight, child.bias)
    return len(swaps)


def use_forward_path(model: nn.Module, path: str) -> None:
    """Put a loaded model on `path` ("eager" or "fast", as `resolve_forward_path` gives it), once, at
    load. Fast packs every linear map of its decoder layers (q/k/v and gate/up fused) and a copy of its
    LM head (which stays as it is where the input embedding shares its weight), a layer at a time,
    releasing the file pages of what it packed (`release_file_pages`)."""
    if path == "fast":
        start = time.perf_counter()
        count = 0
        for layer in decoder_layers(model):
            originals = [m.weight for m in layer.modules() if type(m) is nn.Linear]
            count += sum(len(projection.slices) for projection in fuse_projections(layer).values())
            count += prepack_linears(layer)
            release_file_pages(originals)
        # In __dict__, not as a submodule: the model's parameters and state dict stay as loaded.
        head = model.get_output_embeddings()
        model.__dict__[_ATTRIBUTE] = PrepackedLinear(head.weight, head.bias)
        release_file_pages([head.weight])
        log.info("fast forward path: %d linear maps and the LM head packed for oneDNN in %.1f s",
                 count, time.perf_counter() - start)


# Where a memory-mapped checkpoint's pages can be dropped (`release_file_pages`); elsewhere the fast
# path reads the checkpoint into memory instead (`models.load_model`), so packing frees the originals.
RELEASES_FILE_PAGES = sys.platform == "linux"
_MADV_DONTNEED = 4


def release_file_pages(tensors: Iterable[torch.Tensor]) -> int:
    """Drop from this process's memory the pages of `tensors` that a private read-only file mapping
    backs (a memory-mapped checkpoint); returns the bytes released. Such pages are clean copies of the
    file: a later read faults them back in unchanged. Memory that is not file-backed (or a platform
    without /proc/self/maps) is left alone, so a tensor still in use never loses its contents."""
    if not RELEASES_FILE_PAGES:
        return 0
    mappings = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[1].startswith("r") and fields[1][3] == "p" and fields[5].startswith("/"):
                low, high = (int(x, 16) for x in fields[0].split("-"))
                mappings.append((low, high))
    page = mmap.PAGESIZE
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    released = 0
    for tensor in tensors:
        if tensor.device.type != "cpu" or tensor.is_mkldnn:
            continue
        start = tensor.data_ptr()
        end = start + tensor.numel() * tensor.element_size()  # contiguous: a loaded weight
        first, last = -(-start // page) * page, end // page * page  # whole pages inside the tensor only
        if last > first and any(low <= first and last <= high for low, high in mappings):
            if madvise(first, last - first, _MADV_DONTNEED) == 0:
                released += last - first
    return released


def is_fast(model: nn.Module) -> bool:
    """Whether `model` runs on the fast path (`use_forward_path`)."""
    return _ATTRIBUTE in model.__dict__


def forward_path_of(model: nn.Module) -> str:
    return "fast" if is_fast(model) else "eager"


def lm_head(model: nn.Module) -> nn.Module:
    """The model's LM head as it runs on its forward path (hidden [..., h] -> logits [..., vocab])."""
    packed = model.__dict__.get(_ATTRIBUTE)
    return model.get_output_embeddings() if packed is None else packed
