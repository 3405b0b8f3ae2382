"""Train an EAGLE head ("eagle" layout) for a target by self-distillation (`specsparse train-drafter`).

Data: the target's own greedy replies to training prompts (the built-in sets' examples by default, but
the held-out ids: a job's own domain's calibration and test examples are never trained on; or a JSONL
of prompts), generated in lockstep batches,
and optionally more replies per prompt sampled from it (`sampled_replies`): a few hundred prompts
give little data, and teacher forcing makes any text of the target's an exact distillation target.
The target's final-norm features of every position of prompt + reply are the regression targets.

Losses, as EAGLE-1: smooth-L1 between the predicted and the target's next feature, plus 0.1 x the
cross-entropy between the target's next-token distribution and the head's (both through the
target's LM head, trimmed to the draft vocabulary with `vocab_size`), on the positions that predict
reply tokens (EAGLE masks all but the assistant's turns; `prompt_loss_weight` weighs the prompt's). The embedding and the LM head
are the target's and stay frozen; input features get uniform noise (EAGLE's width 0.2).
Deviations, for a few hundred prompts instead of ShareGPT's 68k conversations on a CPU: learning rate
1e-3 (EAGLE: 3e-5) with a linear warm-up and cosine decay; the target's next-token distribution
kept as its top-32 (computed once, not every epoch; the tail's mass is dropped from the
cross-entropy); 10% of the sequences held out to report the head's top-1 agreement with the target
each epoch. The features and distributions wait in host memory up to `feature_memory_mb`, on disk
beyond it (data.py).

The output directory holds the checkpoint (`model.safetensors`, `config.json`: `drafter=eagle
drafter.path=DIR`), the generated data (`data.json`; heads a job's `drafter.train` recipe trains keep
it in their folder's `data/`, shared by heads trained on the same replies), its replies as text (`responses.jsonl`, one
{"response", "id"} per training sequence, the id its built-in example's: the corpus the vocabulary paper
counts a draft vocabulary on, `vocab_corpus=[DIR/responses.jsonl]`), `training.json` (losses and
agreement per epoch, and `trained_ids`: the built-in examples of its data) and, while training runs,
`resume.pt` (and `features/` for data beyond `feature_memory_mb`): an interrupted run started again
resumes there.
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Subset
from tqdm.auto import tqdm

from specsparse.data import DOMAINS, build_messages
from specsparse.decoding.batched import generate_batch
from specsparse.decoding.forward_path import linear_map
from specsparse.decoding.generation import encode_messages
from specsparse.decoding.models import LoadedModel
from specsparse.decoding.skipping import FINAL_HIDDEN
from specsparse.drafters.eagle.checkpoint import save_eagle_head
from specsparse.drafters.eagle.data import DistillationSequence, data_bytes, distillation_data
from specsparse.drafters.eagle.head import EagleHead, eagle3_feature_layers, head_config
from specsparse.drafters.eagle.recipe import TrainingRecipe, builtin_training, read_vocab_file
from specsparse.types import GenerationConfig
from specsparse.util import atomic_write_text, content_hash, file_sha256

log = logging.getLogger(__name__)



def training_prompts(target: LoadedModel, recipe: TrainingRecipe) -> list[tuple[str | None, list[int]]]:
    """(built-in example id or None for a prompt file's, token ids with the chat template applied) of
    every training prompt's first turn."""
    source = recipe.prompts
    if source == "builtin":
        return [(ex.id, encode_messages(target.tokenizer, build_messages(DOMAINS[name], ex, 0)))
                for name, examples in builtin_training(recipe).items() for ex in examples]
    from specsparse.data.prompts import read_prompt_records  # noqa: PLC0415

    return [(None, encode_messages(target.tokenizer, record.turns[0])) for record in read_prompt_records(source)]


def generate_data(target: LoadedModel, recipe: TrainingRecipe, batch_size: int = 16) -> list[dict]:
    """{"tokens": prompt + a reply of the target, "prompt_length", "id": the built-in example's}: per
    training prompt its greedy reply (lockstep batches), then `sampled_replies` sampled ones (HF
    generate, left-padded batches)."""
    pairs = training_prompts(target, recipe)
    prompts = [p for _, p in pairs]
    config = GenerationConfig(max_new_tokens=recipe.max_new_tokens, num_draft_tokens=0)
    with tqdm(total=len(prompts), desc="target replies", unit="prompt") as bar:
        results = generate_batch(target.model, prompts, None, config, (), target.eos_token_ids, batch_size,
                                 on_done=lambda _: bar.update())
    replies = [(i, list(r.new_token_ids)) for i, r in enumerate(results)]
    if recipe.sampled_replies:
        replies += sampled_replies(target, prompts, recipe, batch_size)
    return [{"tokens": (prompts[i] + reply)[: recipe.max_length], "prompt_length": len(prompts[i]), "id": pairs[i][0]}
            for i, reply in replies]


def sampled_replies(target: LoadedModel, prompts: Sequence[Sequence[int]], recipe: TrainingRecipe,
                    batch_size: int) -> list[tuple[int, list[int]]]:
    """(prompt index, reply): `recipe.sampled_replies` sampled replies per prompt (temperature
    `recipe.temperature`)."""
    model = target.model
    eos = list(target.eos_token_ids)
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else (eos or [0])[0]
    torch.manual_seed(recipe.seed)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths pad little
    out: list[tuple[int, list[int]]] = []
    with tqdm(total=len(prompts), desc="sampled replies", unit="prompt") as bar, torch.inference_mode():
        for first in range(0, len(order), batch_size):
            indices = order[first : first + batch_size]
            group = [prompts[i] for i in indices]
            width = max(len(p) for p in group)
            ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in group], device=model.device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group], device=model.device)
            generated = model.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, temperature=recipe.temperature, top_k=0,
                top_p=1.0, max_new_tokens=recipe.max_new_tokens, num_return_sequences=recipe.sampled_replies,
                pad_token_id=pad, eos_token_id=eos or None,
            )[:, width:].tolist()
            for row, reply in enumerate(generated):
                stop = next((i + 1 for i, token in enumerate(reply) if token in eos), len(reply))
                out.append((indices[row // recipe.sampled_replies], reply[:stop]))
            bar.update(len(group))
    return out


def draft_vocabulary(replies: Sequence[Sequence[int]], recipe: TrainingRecipe, vocab_size: int) -> torch.Tensor | None:
    """The draft vocabulary's target ids, ascending (None: the full vocabulary): `vocab_file`'s, or
    the `vocab_size` most frequent tokens of the target's replies."""
    recipe.check_vocabulary(vocab_size)
    if recipe.vocab_file is not None:
        return torch.tensor(read_vocab_file(recipe.vocab_file))
    if recipe.vocab_size is None or recipe.vocab_size == vocab_size:
        return None
    counts = Counter(token for reply in replies for token in reply)
    ranked = [token for token, _ in counts.most_common(recipe.vocab_size)]
    return torch.tensor(sorted(ranked))


def start_from_target_head(head: EagleHead, model, target_rows: torch.Tensor) -> None:
    """An EAGLE-3 head's own LM head and final norm start as the target's (its draft vocabulary's
    rows): the head learns to predict features the target's head reads (a deviation: EAGLE-3 trains
    them from scratch on 68k conversations)."""
    with torch.no_grad():
        head.lm_head.weight.copy_(target_rows)
        norm = getattr(getattr(model, "model", model), "norm", None)
        if norm is not None and getattr(norm, "weight", None) is not None:
            head.norm.weight.copy_(norm.weight.float())


class Trainer:
    """The training loop over (features, tokens) sequences; `state_dict` makes it resumable."""

    def __init__(self, head: EagleHead, embedding: nn.Module, head_weight: torch.Tensor | None,
                 recipe: TrainingRecipe, total_steps: int):
        self.head = head
        self.embedding = embedding
        # The frozen target rows "eagle" drafts with (eager: they are read, never trained); None: the head's own.
        self.target_head = None if head_weight is None else linear_map(head_weight, fast=False)
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

    def losses(self, batch: list[DistillationSequence], noise: bool) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """(loss, its parts, top-1 agreement at each reply position) of one padded batch.
        Position j reads (f_j, x_{j+1}) and predicts f_{j+1}, whose logits predict x_{j+2}; the
        positions predicting reply tokens (j >= prompt length - 2) weigh 1, the prompt's
        `prompt_loss_weight`. "eagle": smooth-L1 on f_{j+1} + token_loss_weight x cross-entropy;
        "eagle3": EAGLE-3's training-time test (`_ttt_loss`)."""
        width = max(len(s.tokens) for s in batch) - 1
        feature_width = batch[0].features.shape[-1]
        top_k = batch[0].target_ids.shape[-1]
        states = torch.zeros(len(batch), width, feature_width)
        targets = torch.zeros(len(batch), width, feature_width)
        tokens = torch.zeros(len(batch), width + self.recipe.ttt_steps, dtype=torch.long)  # x_{j+1}, then later ones
        target_ids = torch.zeros(len(batch), width, top_k, dtype=torch.long)
        target_probs = torch.zeros(len(batch), width, top_k)
        weights = torch.zeros(len(batch), width)
        for row, sequence in enumerate(batch):
            n = len(sequence.tokens) - 1
            states[row, :n], targets[row, :n] = sequence.features[:-1], sequence.features[1:]
            tokens[row, :n] = sequence.tokens[1:]
            target_ids[row, :n], target_probs[row, :n] = sequence.target_ids, sequence.target_probs
            reply = max(sequence.prompt_length - 2, 0)
            weights[row, :reply] = self.recipe.prompt_loss_weight
            weights[row, reply:n] = 1.0
        if noise and self.recipe.feature_noise > 0 and self.head.layout == "eagle":
            states = states + (torch.rand(states.shape, generator=self.generator) - 0.5) * self.recipe.feature_noise
        device = self.head.fc.weight.device
        states, targets, tokens, target_ids, target_probs, weights = (
            t.to(device) for t in (states, targets, tokens, target_ids, target_probs, weights))
        positions = torch.arange(width, device=device).expand(len(batch), width)
        if self.head.layout == "eagle3":
            return self._ttt_loss(states, tokens, positions, target_ids, target_probs, weights)
        predicted = self.head(states, self.embedding(tokens[:, :width]).float(), positions)
        used = weights > 0
        predicted, targets, weights = predicted[used], targets[used], weights[used]
        target_ids, target_probs = target_ids[used], target_probs[used]
        weight_sum = weights.sum().clamp(min=1e-6)
        feature_loss = (nn.functional.smooth_l1_loss(predicted, targets, reduction="none").mean(-1) * weights).sum() / weight_sum
        log_probs = torch.log_softmax(self.head.logits(predicted, self.target_head), dim=-1)
        token_loss = (-(target_probs * log_probs.gather(-1, target_ids)).sum(-1) * weights).sum() / weight_sum
        agreement = (log_probs.argmax(-1) == target_ids[:, 0]).float()[weights == 1.0]
        loss = feature_loss + self.recipe.token_loss_weight * token_loss
        return loss, {"feature_loss": feature_loss, "token_loss": token_loss}, agreement

    def _ttt_loss(self, states, tokens, positions, target_ids, target_probs, weights):
        """EAGLE-3's training-time test (`ttt_outputs`): step s at position j predicts x_{j+2+s}
        against the target's distribution at j+s; its cross-entropy weighs 0.8^s (EAGLE-3's
        weights). No feature loss."""
        total = torch.zeros((), device=states.device)
        parts: dict[str, torch.Tensor] = {}
        agreement = torch.zeros(0, device=states.device)
        for step, hidden in enumerate(ttt_outputs(self.head, self.embedding, states, tokens, positions,
                                                  self.recipe.ttt_steps)):
            step_weights = _shift(weights, step)
            used = step_weights > 0
            log_probs = torch.log_softmax(self.head.logits(hidden[used], None), dim=-1)
            ids, probs = _shift(target_ids, step)[used], _shift(target_probs, step)[used]
            loss = (-(probs * log_probs.gather(-1, ids)).sum(-1) * step_weights[used]).sum()
            loss = loss / step_weights[used].sum().clamp(min=1e-6)
            total = total + 0.8**step * loss
            parts[f"token_loss_step{step}"] = loss
            if step == 0:
                agreement = (log_probs.argmax(-1) == ids[:, 0]).float()[step_weights[used] == 1.0]
        parts["token_loss"] = parts["token_loss_step0"]
        return total, parts, agreement

    def train_epoch(self, data, bar) -> dict:
        order = list(range(len(data)))
        random.Random(self.recipe.seed + self.epoch).shuffle(order)
        totals: dict[str, float] = {}
        steps = 0
        self.head.train()
        for first in range(0, len(order), self.recipe.batch_size):
            loss, parts, _ = self.losses([data[i] for i in order[first : first + self.recipe.batch_size]], True)
            self.optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_value_(self.head.parameters(), 0.5)
            self.optimizer.step()
            self.schedule.step()
            for name, value in parts.items():
                totals[name] = totals.get(name, 0.0) + float(value.detach())
            steps += 1
            bar.update()
            bar.set_postfix(epoch=self.epoch + 1, loss=f"{float(loss.detach()):.3f}")
        self.head.eval()
        return {key: value / max(steps, 1) for key, value in totals.items()}

    def agreement(self, data) -> float:
        """Share of held-out reply positions where the head's token (from its predicted feature) is the
        target's greedy token: about the engine's acceptance rate of a first draft."""
        hits = positions = 0
        with torch.no_grad():
            for first in range(0, len(data), self.recipe.batch_size):
                batch = [data[i] for i in range(first, min(first + self.recipe.batch_size, len(data)))]
                agreement = self.losses(batch, False)[2]
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


def trained_head(target: LoadedModel, root: str | Path, recipe: TrainingRecipe) -> Path:
    """The head `recipe` trains for `target`: `root/<hash of target identity, recipe and vocabulary file>`,
    trained now if missing (concurrent workers wait for it), reused by every later job and sweep."""
    from filelock import FileLock  # noqa: PLC0415

    recipe.check()
    key = {"target": target.identity, "recipe": recipe.identity(),
           "vocab_file": file_sha256(recipe.vocab_file) if recipe.vocab_file else None}
    directory = Path(root) / content_hash(key)[:16]
    directory.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{directory}.lock"):
        if not (directory / "config.json").is_file():
            with FileLock(str(Path(root) / "data.lock")):  # heads trained on the same replies generate them once
                training_records(target, recipe, Path(root) / "data")
            train_eagle_head(target, directory, recipe, data_dir=Path(root) / "data")
    return directory


def training_data_key(target: LoadedModel, recipe: TrainingRecipe) -> dict:
    """What decides the generated training data (heads of recipes that differ elsewhere share it), as
    JSON gives it back (a recipe's tuples as lists), so a stored key compares equal."""
    key = {"target": target.identity, "prompts": recipe.prompts, "domains": recipe.domains,
           "held_out_ids": recipe.held_out_ids, "prompts_per_set": recipe.prompts_per_set,
           "max_new_tokens": recipe.max_new_tokens, "max_length": recipe.max_length,
           "sampled_replies": recipe.sampled_replies, "temperature": recipe.temperature, "seed": recipe.seed}
    return json.loads(json.dumps(key))


def training_records(target: LoadedModel, recipe: TrainingRecipe, where: str | Path) -> list[dict]:
    """The recipe's training data (`generate_data`), generated once and kept in `where`: a file, or
    a folder holding one file per data key."""
    key = training_data_key(target, recipe)
    path = Path(where)
    if path.suffix != ".json":
        path = path / f"{content_hash(key)[:16]}.json"
    recorded = json.loads(path.read_text()) if path.is_file() else None
    if recorded is not None and recorded["key"] == key:
        return recorded["records"]
    records = generate_data(target, recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_json(path, {"key": key, "records": records})
    return records


def train_eagle_head(target: LoadedModel, output: str | Path, recipe: TrainingRecipe = TrainingRecipe(),
                     data_dir: str | Path | None = None) -> Path:
    """Train (or resume training) an EAGLE head for `target` into `output`; returns the directory.
    data_dir: where the generated data is kept by content (shared by heads trained on the same
    replies, e.g. one per draft vocabulary); None: `output/data.json`."""
    recipe.check()
    recipe.check_vocabulary(target.model.config.vocab_size)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(recipe.seed)
    started = time.perf_counter()
    data_key = training_data_key(target, recipe)
    records = training_records(target, recipe, output / "data.json" if data_dir is None else data_dir)
    responses = [{"response": target.tokenizer.decode(r["tokens"][r["prompt_length"]:], skip_special_tokens=True),
                  "id": r["id"]} for r in records]
    atomic_write_text(output / "responses.jsonl", "".join(json.dumps(r) + "\n" for r in responses))
    sequences = [r["tokens"] for r in records]
    model = target.model
    draft_to_target = draft_vocabulary([r["tokens"][r["prompt_length"]:] for r in records], recipe,
                                       model.config.vocab_size)
    layers = (FINAL_HIDDEN,) if recipe.arch == "eagle" else eagle3_feature_layers(model.config.num_hidden_layers)
    head = EagleHead(head_config(model.config), recipe.arch, layers, model.config.hidden_size,
                     fc_bias=recipe.arch == "eagle", draft_to_target=draft_to_target).float().to(model.device)
    target_head = model.get_output_embeddings().weight.detach().float()
    target_rows = target_head if draft_to_target is None else target_head[draft_to_target.to(target_head.device)]
    if recipe.arch == "eagle3":
        start_from_target_head(head, model, target_rows)
    head_weight = head.head_weight(target_head)
    used = [r for r in records if len(r["tokens"]) > r["prompt_length"]]
    top_k = min(recipe.target_top_k, len(target_rows))
    data_size = data_bytes([len(r["tokens"]) for r in used], len(layers) * model.config.hidden_size, top_k)
    on_disk = data_size > recipe.feature_memory_mb * 2**20
    data = distillation_data(target, used, target_rows, top_k, layers, output / "features" if on_disk else None)
    order = list(range(len(data)))
    random.Random(recipe.seed).shuffle(order)
    held_out = Subset(data, order[: max(1, len(data) // 10)])
    train = Subset(data, order[len(held_out):])
    steps_per_epoch = math.ceil(len(train) / recipe.batch_size)
    embedding = model.get_input_embeddings()
    trainer = Trainer(head, lambda ids: embedding(ids).detach().float(), head_weight,
                      recipe, steps_per_epoch * recipe.epochs)
    resume_path = output / "resume.pt"
    if resume_path.is_file():
        state = torch.load(resume_path, weights_only=False, map_location=model.device)
        if state.get("recipe") == recipe.identity() and state.get("data_key") == data_key:
            trainer.load_state_dict(state)
            log.warning("resuming EAGLE training at epoch %d of %d", trainer.epoch + 1, recipe.epochs)
    with tqdm(total=steps_per_epoch * recipe.epochs, initial=steps_per_epoch * trainer.epoch,
              desc="train EAGLE head", unit="step") as bar:
        while trainer.epoch < recipe.epochs:
            losses = trainer.train_epoch(train, bar)
            trainer.history.append({"epoch": trainer.epoch + 1, **losses, "held_out_agreement": trainer.agreement(held_out)})
            trainer.epoch += 1
            partial = resume_path.with_suffix(".pt.partial")  # replaced whole: a kill never leaves half a file
            torch.save({**trainer.state_dict(), "recipe": recipe.identity(), "data_key": data_key}, partial)
            partial.replace(resume_path)
            bar.set_postfix(epoch=trainer.epoch, agreement=f"{trainer.history[-1]['held_out_agreement']:.3f}")
    save_eagle_head(head, output)
    _write_json(output / "training.json", {
        "recipe": asdict(recipe), "target": target.identity, "sequences": len(data), "held_out_sequences": len(held_out),
        "tokens": sum(len(s) for s in sequences), "reply_tokens": sum(len(r["tokens"]) - r["prompt_length"] for r in records),
        "draft_vocab_size": head.draft_vocab_size, "features": {"bytes": data_size, "on_disk": on_disk},
        # The built-in examples its data came from, trained on or held out for agreement (None: a prompt
        # file's): a job refuses a head trained on its own domain's calibration or test prompts.
        "trained_ids": sorted({r["id"] for r in records}) if recipe.prompts == "builtin" else None,
        "seconds": time.perf_counter() - started, "history": trainer.history,
    })
    resume_path.unlink()
    shutil.rmtree(output / "features", ignore_errors=True)
    return output


def ttt_outputs(head: EagleHead, embedding, states: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                steps: int) -> Iterator[torch.Tensor]:
    """The head's outputs [batch, width, h] at each step of EAGLE-3's training-time test, all
    positions at once. Step 0 reads the fused target features `states` [batch, width, F] with the
    tokens x_{j+1}; step s reads the head's own step s-1 outputs with the tokens x_{j+1+s}
    (`tokens` [batch, width + steps - 1] holds x_1, x_2, ...), at positions j+s, attending to the
    step-0 keys of positions <= j and to its own column's keys of steps 1..s: step s at column j is
    what drafting s tokens along the real continuation after position j+1 computes."""
    from transformers import DynamicCache  # noqa: PLC0415 - keys concatenated, so gradients flow

    batch, width = states.shape[:2]
    device = states.device
    cache = DynamicCache(config=head.config)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    diagonal = torch.eye(width, dtype=torch.bool, device=device)
    hidden = head.fuse(states)
    for step in range(steps):
        mask = torch.cat([causal, *[diagonal] * step], dim=1)[None, None].expand(batch, 1, width, -1)
        hidden = head(hidden, embedding(tokens[:, step : step + width]).float(), positions + step, cache, mask)
        yield hidden


def _shift(values: torch.Tensor, step: int) -> torch.Tensor:
    """values[:, j + step] at column j (zeros past the end)."""
    return torch.cat([values[:, step:], torch.zeros_like(values[:, :step])], dim=1)


def _write_json(path: Path, value) -> None:
    atomic_write_text(path, json.dumps(value))
