"""What an EAGLE head trains on (training.py): per training sequence, the dense target's features
and its next-token distributions, computed once per run (`distillation_data`).

They stay in host memory when they fit the recipe's `feature_memory_mb`; beyond it they are written to
disk as they are computed (`FeatureStore`, a folder beside the head) and read back one sequence at a
time, so host memory holds one batch whatever the data's size (an 8B target's features of 10k
sequences take hundreds of GB). Both hold the same tensors, so the trained head is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from specsparse.decoding.models import LoadedModel
from specsparse.decoding.session import ModelSession
from specsparse.decoding.skipping import FINAL_HIDDEN


@dataclass(frozen=True)
class DistillationSequence:
    """One training sequence: tokens [n], the dense target's features the head reads [n, F] (final-norm
    states for "eagle", the three fused streams for "eagle3"), and at positions 1..n-1 the target's
    next-token distribution over the draft vocabulary as its top-k (draft ids [n-1, k] and
    probabilities [n-1, k], renormalised over the draft vocabulary as EAGLE-3 does; the tail's mass
    is dropped)."""

    tokens: torch.Tensor
    prompt_length: int
    features: torch.Tensor
    target_ids: torch.Tensor
    target_probs: torch.Tensor


def data_bytes(lengths: Sequence[int], feature_width: int, top_k: int) -> int:
    """Host memory of the sequences of these lengths: int64 tokens, float32 features [n, feature_width],
    int32 ids and float32 probabilities [n - 1, top_k]."""
    return sum(n * (8 + 4 * feature_width) + (n - 1) * top_k * 8 for n in lengths)


class FeatureStore:
    """Distillation sequences on disk: one flat file per field, appended to; `store[i]` reads sequence i
    back (only its bytes), as the tensors it was given."""

    FIELDS = {"tokens": np.int64, "features": np.float32, "target_ids": np.int32, "target_probs": np.float32}

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in self.FIELDS:
            (self.folder / name).write_bytes(b"")  # a rerun writes the data anew
        self.index: list[tuple[int, int, int, int]] = []  # (prompt length, tokens, first position, first target row)
        self.widths = {"tokens": 1}
        self.positions = self.rows = 0

    def append(self, sequence: DistillationSequence) -> None:
        self.widths.update(features=sequence.features.shape[-1], target_ids=sequence.target_ids.shape[-1],
                           target_probs=sequence.target_probs.shape[-1])
        for name in self.FIELDS:
            with open(self.folder / name, "ab") as file:
                getattr(sequence, name).numpy().tofile(file)
        self.index.append((sequence.prompt_length, len(sequence.tokens), self.positions, self.rows))
        self.positions += len(sequence.tokens)
        self.rows += len(sequence.target_ids)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> DistillationSequence:
        prompt_length, n, position, row = self.index[i]
        read = {name: self._read(name, start, count) for name, start, count in (
            ("tokens", position, n), ("features", position, n), ("target_ids", row, n - 1),
            ("target_probs", row, n - 1))}
        return DistillationSequence(read["tokens"][:, 0], prompt_length, read["features"], read["target_ids"],
                                    read["target_probs"])

    def _read(self, name: str, start: int, count: int) -> torch.Tensor:
        dtype, width = np.dtype(self.FIELDS[name]), self.widths[name]
        values = np.fromfile(self.folder / name, dtype, count=count * width, offset=start * width * dtype.itemsize)
        return torch.from_numpy(values.reshape(count, width))


def distillation_data(target: LoadedModel, records: Sequence[dict], target_rows: torch.Tensor, top_k: int,
                      feature_layers: Sequence[int] = (FINAL_HIDDEN,),
                      spill_to: str | Path | None = None) -> list[DistillationSequence] | FeatureStore:
    """The target's features and next-token distributions (its LM head's `target_rows`, the draft
    vocabulary's), one forward per sequence: computed once, not every epoch (the distributions are
    most of a step's cost over a 49k vocabulary). spill_to: a folder to write them to as they are
    computed (a `FeatureStore`) instead of keeping them in memory."""
    layers = tuple(feature_layers) if FINAL_HIDDEN in feature_layers else (*feature_layers, FINAL_HIDDEN)
    width = target.model.config.hidden_size
    data: list[DistillationSequence] | FeatureStore = [] if spill_to is None else FeatureStore(spill_to)
    with torch.inference_mode():
        for record in tqdm(records, desc="target features", unit="seq"):
            session = ModelSession(target.model, (), layers)
            session.hidden_states(record["tokens"])
            features = session.features.float()
            final = features[:, -width:]
            inputs = features if len(layers) == 1 else features[:, : len(feature_layers) * width]
            probs = torch.softmax(nn.functional.linear(final[1:], target_rows), dim=-1)
            top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
            data.append(DistillationSequence(torch.tensor(record["tokens"]), record["prompt_length"],
                                             inputs.contiguous().cpu(), top.indices.int().cpu(), top.values.cpu()))
    return data
