"""Train an EAGLE head ("eagle" layout) for a target by self-distillation (`specsparse train-drafter`).

Data: the target's own greedy replies to training prompts (the built-in sets' calibration splits by
default, so their test splits stay held out; or a JSONL of prompts), generated in lockstep batches.
The target's final-norm features of every position of prompt + reply are the regression targets.

Losses, as EAGLE-1: smooth-L1 between the predicted and the target's next feature, plus 0.1 x the
cross-entropy between the target's next-token distribution and the head's (both through the
target's LM head, trimmed to the draft vocabulary with `vocab_size`). The embedding and the LM head
are the target's and stay frozen; input features get uniform noise (EAGLE's width 0.2).
Deviations, for a few hundred prompts instead of ShareGPT's 68k conversations: learning rate 1e-3
(EAGLE: 3e-5) with a linear warm-up and cosine decay, and 10% of the sequences held out to report
the head's top-1 agreement with the target each epoch.

The output directory holds the checkpoint (`model.safetensors`, `config.json`: `drafter=eagle
drafter.path=DIR`), the generated data (`data.json`), `training.json` (losses and agreement per
epoch) and, while training runs, `resume.pt`: an interrupted run started again resumes there.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import LlamaConfig

from specsparse.data import DOMAINS, build_messages, load_examples
from specsparse.data.split import split_examples
from specsparse.decoding.batched import generate_batch
from specsparse.decoding.generation import encode_messages
from specsparse.decoding.models import LoadedModel
from specsparse.decoding.session import ModelSession
from specsparse.decoding.skipping import FINAL_HIDDEN
from specsparse.drafters.eagle import EagleHead
from specsparse.types import GenerationConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingRecipe:
    """Everything that decides the trained head (a resumed run must match it)."""

    prompts: str = "builtin"  # builtin (the built-in calibration splits) or a JSONL of prompts
    max_new_tokens: int = 128
    epochs: int = 10
    learning_rate: float = 1e-3
    batch_size: int = 8  # sequences per optimiser step
    max_length: int = 512  # tokens per training sequence (longer ones are cut)
    vocab_size: int | None = None  # trimmed draft vocabulary: the k most frequent tokens of the data
    vocab_file: str | None = None  # or the ids in a JSON list (e.g. a TPE search's pick)
    feature_noise: float = 0.2
    seed: int = 0

    def check(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.max_new_tokens < 1 or self.max_length < 8:
            raise ValueError("epochs, batch size and max new tokens must be >= 1 and max length >= 8")
        if not self.learning_rate > 0:
            raise ValueError(f"learning rate must be positive, got {self.learning_rate}")
        if self.vocab_size is not None and self.vocab_file is not None:
            raise ValueError("give --vocab-size or --vocab-file, not both")
        if self.vocab_size is not None and self.vocab_size < 2:
            raise ValueError(f"--vocab-size {self.vocab_size}: keep at least 2 tokens")


def training_prompts(target: LoadedModel, source: str) -> list[list[int]]:
    """Token ids (chat template applied) of every training prompt's first turn."""
    if source == "builtin":
        prompts = []
        for domain in DOMAINS.values():
            calibration, _ = split_examples(load_examples(domain, "builtin"))
            prompts += [encode_messages(target.tokenizer, build_messages(domain, ex, 0)) for ex in calibration]
        return prompts
    from specsparse.serving.prompts import read_prompt_records  # noqa: PLC0415

    return [encode_messages(target.tokenizer, record.turns[0]) for record in read_prompt_records(source)]


def generate_data(target: LoadedModel, recipe: TrainingRecipe, batch_size: int = 16) -> list[list[int]]:
    """Prompt + the target's greedy reply, per training prompt."""
    prompts = training_prompts(target, recipe.prompts)
    config = GenerationConfig(max_new_tokens=recipe.max_new_tokens, num_draft_tokens=0)
    with tqdm(total=len(prompts), desc="target replies", unit="prompt") as bar:
        results = generate_batch(target.model, prompts, None, config, (), target.eos_token_ids, batch_size,
                                 on_done=lambda _: bar.update())
    return [(list(p) + list(r.new_token_ids))[: recipe.max_length] for p, r in zip(prompts, results)]


def draft_vocabulary(sequences: Sequence[Sequence[int]], recipe: TrainingRecipe, vocab_size: int) -> torch.Tensor | None:
    """The draft vocabulary's target ids, ascending (None: the full vocabulary)."""
    if recipe.vocab_file is not None:
        ids = sorted({int(i) for i in json.loads(Path(recipe.vocab_file).read_text())})
        if not ids or ids[0] < 0 or ids[-1] >= vocab_size:
            raise ValueError(f"{recipe.vocab_file}: expected a JSON list of token ids within 0..{vocab_size - 1}")
        return torch.tensor(ids)
    if recipe.vocab_size is None or recipe.vocab_size >= vocab_size:
        return None
    counts = Counter(token for sequence in sequences for token in sequence)
    ranked = [token for token, _ in counts.most_common(recipe.vocab_size)]
    return torch.tensor(sorted(ranked))


def head_config(target_config) -> LlamaConfig:
    """One decoder layer shaped like the target's (EAGLE's head), same vocabulary and rotary embedding."""
    fields = target_config.to_dict()
    fields.update(num_hidden_layers=1, tie_word_embeddings=False)
    for key in ("architectures", "layer_types", "auto_map", "_name_or_path", "model_type"):
        fields.pop(key, None)
    return LlamaConfig(**fields)


def target_features(target: LoadedModel, sequences: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """The dense target's final-norm features [n, hidden] of every sequence."""
    features = []
    with torch.inference_mode():
        for sequence in tqdm(sequences, desc="target features", unit="seq"):
            session = ModelSession(target.model, (), (FINAL_HIDDEN,))
            session.hidden_states(sequence)
            features.append(session.features.float().clone())
    return features


class Trainer:
    """The training loop over (features, tokens) sequences; `state_dict` makes it resumable."""

    def __init__(self, head: EagleHead, embedding: nn.Module, target_head: torch.Tensor, recipe: TrainingRecipe,
                 total_steps: int):
        self.head = head
        self.embedding = embedding
        self.target_head = target_head.detach().float()
        self.recipe = recipe
        self.optimizer = torch.optim.AdamW(head.parameters(), lr=recipe.learning_rate, betas=(0.9, 0.95))
        warmup = max(1, total_steps // 20)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda step: min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(step / total_steps, 1.0))),
        )
        self.epoch = 0
        self.history: list[dict] = []
        self.generator = torch.Generator().manual_seed(recipe.seed)

    def losses(self, batch: list[tuple[torch.Tensor, torch.Tensor]], noise: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(feature loss, token loss, top-1 agreements and positions) of one padded batch."""
        width = max(len(tokens) for _, tokens in batch) - 1
        hidden = batch[0][0].shape[-1]
        states = torch.zeros(len(batch), width, hidden)
        targets = torch.zeros(len(batch), width, hidden)
        next_tokens = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.bool)
        for row, (features, tokens) in enumerate(batch):
            n = len(tokens) - 1
            states[row, :n], targets[row, :n] = features[:-1], features[1:]
            next_tokens[row, :n] = tokens[1:]
            mask[row, :n] = True
        if noise and self.recipe.feature_noise > 0:
            states = states + (torch.rand(states.shape, generator=self.generator) - 0.5) * self.recipe.feature_noise
        positions = torch.arange(width).expand(len(batch), width)
        predicted = self.head(states, self.embedding(next_tokens).float(), positions)
        predicted, targets = predicted[mask], targets[mask]
        feature_loss = nn.functional.smooth_l1_loss(predicted, targets)
        with torch.no_grad():
            target_probs = torch.softmax(self.head.logits(targets, self.target_head), dim=-1)
        log_probs = torch.log_softmax(self.head.logits(predicted, self.target_head), dim=-1)
        token_loss = -(target_probs * log_probs).sum(-1).mean()
        agreement = (log_probs.argmax(-1) == target_probs.argmax(-1)).float()
        return feature_loss, token_loss, agreement

    def train_epoch(self, data, bar) -> dict:
        order = list(range(len(data)))
        random.Random(self.recipe.seed + self.epoch).shuffle(order)
        totals = {"feature_loss": 0.0, "token_loss": 0.0}
        steps = 0
        self.head.train()
        for first in range(0, len(order), self.recipe.batch_size):
            feature_loss, token_loss, _ = self.losses([data[i] for i in order[first : first + self.recipe.batch_size]], True)
            loss = feature_loss + 0.1 * token_loss
            self.optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_value_(self.head.parameters(), 0.5)
            self.optimizer.step()
            self.schedule.step()
            totals["feature_loss"] += float(feature_loss.detach())
            totals["token_loss"] += float(token_loss.detach())
            steps += 1
            bar.update()
            bar.set_postfix(epoch=self.epoch + 1, loss=f"{float(loss.detach()):.3f}")
        self.head.eval()
        return {key: value / max(steps, 1) for key, value in totals.items()}

    def agreement(self, data) -> float:
        """Share of held-out positions where the head's token (from its predicted feature) is the target's."""
        hits = positions = 0
        with torch.no_grad():
            for first in range(0, len(data), self.recipe.batch_size):
                _, _, agreement = self.losses(data[first : first + self.recipe.batch_size], False)
                hits += float(agreement.sum())
                positions += len(agreement)
        return hits / max(positions, 1)

    def state_dict(self) -> dict:
        return {"head": self.head.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(), "epoch": self.epoch, "history": self.history,
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.epoch, self.history = state["epoch"], state["history"]
        self.generator.set_state(state["generator"])


def train_eagle_head(target: LoadedModel, output: str | Path, recipe: TrainingRecipe = TrainingRecipe()) -> Path:
    """Train (or resume training) an EAGLE head for `target` into `output`; returns the directory."""
    recipe.check()
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(recipe.seed)
    started = time.perf_counter()
    data_path = output / "data.json"
    recorded = json.loads(data_path.read_text()) if data_path.is_file() else None
    data_key = {"target": target.identity, "prompts": recipe.prompts, "max_new_tokens": recipe.max_new_tokens,
                "max_length": recipe.max_length}
    if recorded is not None and recorded["key"] == data_key:
        sequences = recorded["sequences"]
    else:
        sequences = generate_data(target, recipe)
        _write_json(data_path, {"key": data_key, "sequences": sequences})
    model = target.model
    draft_to_target = draft_vocabulary(sequences, recipe, model.config.vocab_size)
    head = EagleHead(head_config(model.config), "eagle", (FINAL_HIDDEN,), model.config.hidden_size,
                     fc_bias=True, draft_to_target=draft_to_target).float()
    features = target_features(target, sequences)
    data = [(f, torch.tensor(s)) for f, s in zip(features, sequences) if len(s) >= 2]
    random.Random(recipe.seed).shuffle(data)
    held_out = data[: max(1, len(data) // 10)]
    train = data[len(held_out):]
    steps_per_epoch = math.ceil(len(train) / recipe.batch_size)
    embedding = model.get_input_embeddings()
    trainer = Trainer(head, lambda ids: embedding(ids).detach().float(), model.get_output_embeddings().weight,
                      recipe, steps_per_epoch * recipe.epochs)
    resume_path = output / "resume.pt"
    if resume_path.is_file():
        state = torch.load(resume_path, weights_only=False)
        if state.get("recipe") == asdict(recipe) and state.get("data_key") == data_key:
            trainer.load_state_dict(state)
            log.warning("resuming EAGLE training at epoch %d of %d", trainer.epoch + 1, recipe.epochs)
    with tqdm(total=steps_per_epoch * recipe.epochs, initial=steps_per_epoch * trainer.epoch,
              desc="train EAGLE head", unit="step") as bar:
        while trainer.epoch < recipe.epochs:
            losses = trainer.train_epoch(train, bar)
            trainer.history.append({"epoch": trainer.epoch + 1, **losses, "held_out_agreement": trainer.agreement(held_out)})
            trainer.epoch += 1
            torch.save({**trainer.state_dict(), "recipe": asdict(recipe), "data_key": data_key}, resume_path)
            bar.set_postfix(epoch=trainer.epoch, agreement=f"{trainer.history[-1]['held_out_agreement']:.3f}")
    head.save(output)
    _write_json(output / "training.json", {
        "recipe": asdict(recipe), "target": target.identity, "sequences": len(data), "held_out_sequences": len(held_out),
        "tokens": sum(len(s) for s in sequences), "draft_vocab_size": head.draft_vocab_size,
        "seconds": time.perf_counter() - started, "history": trainer.history,
    })
    resume_path.unlink()
    return output


def _write_json(path: Path, value) -> None:
    """Write through a temporary file, so an interrupted run leaves no half-written file."""
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(value))
    partial.replace(path)
