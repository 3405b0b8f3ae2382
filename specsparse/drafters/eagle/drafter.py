"""EAGLE drafters: a one-layer head (head.py) that drafts from the target's own hidden states (features).

At context position j the head reads the target's feature f_j of token x_j and the embedding of the
next token x_{j+1}, and predicts the feature of x_{j+1}; the LM head turns a predicted feature into
the next draft token. Drafting goes on from the head's own predicted features. After each
verification the drafts' head states are dropped and the head reads the target's real features of
the accepted tokens, so its cache always holds (target feature, token) pairs of the committed context.
With target-side skipping the features are those of the sparse target (the session records them).

Checkpoints are read by checkpoint.py; a drafter given a training recipe trains its head on
first use (training.py). Proposals are chains, EAGLE-2's dynamic trees (`tree`) or static trees
(`tree_choices`); see `EagleDrafter`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from specsparse.decoding.drafter import Drafter, Proposal
from specsparse.decoding.forward_path import head_rows, is_fast, lm_head, prepack_linears
from specsparse.decoding.session import ModelSession
from specsparse.decoding.skipping import SkipAwareCache
from specsparse.drafters.base import ConfiguredDrafter, PlannedJob
from specsparse.drafters.eagle.checkpoint import load_eagle_head, own_vocabulary, trained_ids
from specsparse.drafters.eagle.head import EagleHead
from specsparse.drafters.eagle.recipe import recipe_from_options
from specsparse.drafters.eagle.training import trained_head
from specsparse.util import checkpoint_sha256


def _cached_head(source: str, model: PreTrainedModel) -> EagleHead:
    """The head at `source` for `model`, loaded once per process (kept on the model, keyed by the
    checkpoint's file hashes so a retrained one loads anew), on the model's forward path."""
    files = tuple(sorted(checkpoint_sha256(source).items())) if Path(source).is_dir() else ()
    heads = model.__dict__.setdefault("_specsparse_eagle_heads", {})
    if (source, files) not in heads:
        head = load_eagle_head(source, model.config, model.config.num_hidden_layers)
        head = head.to(device=model.device, dtype=model.dtype)
        if is_fast(model):
            prepack_linears(head)
        heads[(source, files)] = head
    return heads[(source, files)]


class EagleDrafter(ConfiguredDrafter):
    """Chains or trees of drafts from an EAGLE head over the target's features.

    tree: (top_k, total_tokens) for EAGLE-2's dynamic trees: depth by depth the top_k children of
    the top_k best nodes by cumulative log-probability, keeping the total_tokens best nodes of all
    it drafted (an ancestor scores at least its child, so the kept nodes form a tree).
    tree_choices: a static tree, as EAGLE-1's choice lists: paths of child ranks from the root
    ([[0], [1], [0, 0]]: the top two tokens, and the top token after the first).
    Neither: chains. A tree is at most the step's k deep.
    """

    name = "eagle"
    trims_vocabulary = True  # full-vocabulary heads draft through rows of their LM head
    # Proposals depend on the committed context and the target's features of it, which a greedy
    # continuation fixes: replay computes them in one forward per sequence (`replay_drafters`).
    replayable = True
    # A head a recipe trains (`train`) never trains on what the job measures: its domain's calibration
    # and test examples.
    job_context = ("exclude_ids",)

    def __init__(self, head: EagleHead, target: PreTrainedModel, tree: Sequence[int] | None = None,
                 vocab_ids: Sequence[int] | None = None, tree_choices: Sequence[Sequence[int]] | None = None):
        self.head = head
        self.target = target
        self.embedding = target.get_input_embeddings()
        self.feature_layers = head.feature_layers
        output = target.get_output_embeddings()
        fast = is_fast(target)
        self.vocab_ids = None if vocab_ids is None else sorted({int(i) for i in vocab_ids})
        # The LM head it drafts with, hidden -> draft-vocabulary logits (None: an EAGLE-3 head's own).
        if self.vocab_ids is None:
            self.draft_to_target = head.draft_to_target
            if head.layout == "eagle3":
                self.draft_head = None
            else:
                self.draft_head = lm_head(target) if head.draft_to_target is None else head_rows(
                    output, head.draft_to_target, fast)
        else:  # a trimmed vocabulary chosen outside the checkpoint (search=tpe_vocab): rows of the LM head it
            # drafts with (the target's for EAGLE-1/2, its own for EAGLE-3)
            if head.draft_to_target is not None:
                raise ValueError("this head was trained with a trimmed vocabulary of its own (d2t): only a "
                                 "full-vocabulary head drafts from a vocabulary chosen after training")
            self.draft_to_target = torch.tensor(self.vocab_ids, device=output.weight.device)
            self.draft_head = head_rows(output if head.layout == "eagle" else head.lm_head, self.draft_to_target, fast)
        if tree is not None and (len(tree) != 2 or min(tree) < 1):
            raise ValueError(f"eagle tree must be [top_k, total_tokens] with both >= 1, got {list(tree)}")
        if tree is not None and tree_choices is not None:
            raise ValueError("give drafter.tree (dynamic) or drafter.tree_choices (static), not both")
        self.tree = None if tree is None else (int(tree[0]), int(tree[1]))
        self.tree_choices = None if tree_choices is None else _check_choices(tree_choices)
        self.drafts_trees = self.tree is not None or self.tree_choices is not None

    @classmethod
    def from_target(cls, target, vocab_ids=None, path: str = "", tree: Sequence[int] | None = None,
                    tree_choices: Sequence[Sequence[int]] | None = None, train: dict | None = None,
                    exclude_ids: Sequence[str] = ()) -> EagleDrafter:
        """The head at `path` for `target`. With `train` (`TrainingRecipe` fields), `path` is a folder of
        trained heads keyed by target and recipe: the one this recipe makes, with `exclude_ids` held
        out of its training prompts (a job gives its domain's calibration and test ids), is trained
        there first if missing (once; concurrent workers wait for it), and reused by every later job."""
        if not path:
            raise ValueError("drafter=eagle needs drafter.path=<EAGLE checkpoint directory or Hub id> "
                             "(`specsparse train-drafter` makes one)")
        if train is not None:
            path = str(trained_head(target, path, recipe_from_options(train).holding_out(exclude_ids)))
        model = target.model
        drafter = cls(head=_cached_head(str(path), model), target=model, tree=tree, vocab_ids=vocab_ids,
                      tree_choices=tree_choices)
        drafter.checkpoint = Path(path)
        return drafter

    def recorded_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The trained checkpoint in place of the recipe that trained it (serving never trains)."""
        if "train" not in options:
            return dict(options)
        return {key: value for key, value in options.items() if key != "train"} | {"path": str(self.checkpoint)}

    @classmethod
    def check_options(cls, path: str = "", tree: Sequence[int] | None = None,
                      tree_choices: Sequence[Sequence[int]] | None = None, train: dict | None = None) -> None:
        if train is not None:
            recipe_from_options(train)

    @classmethod
    def drafts_trees_with(cls, options: Mapping[str, Any]) -> bool:
        """A dynamic `tree` or static `tree_choices` drafts trees."""
        return bool(options.get("tree") or options.get("tree_choices"))

    @classmethod
    def knows_training_replies(cls, options: Mapping[str, Any]) -> bool:
        """A recipe's head (trained by the job), or a head `specsparse train-drafter` wrote."""
        path = options.get("path")
        return bool(options.get("train")) or (isinstance(path, str) and (Path(path) / "responses.jsonl").is_file())

    @classmethod
    def trains_at_k(cls, options: Mapping[str, Any]) -> bool:
        return bool(options.get("train"))

    @classmethod
    def check_job(cls, options: Mapping[str, Any], job: PlannedJob) -> None:
        """A vocabulary search picks rows of a full-vocabulary head only; a trained head (drafter.path)
        whose training.json lists built-in example ids it trained on must not have trained on any
        prompt the job measures (a recipe's head is trained without them)."""
        train = options.get("train") or {}
        path = options.get("path")
        if job.trims_vocabulary and (
                reason := own_vocabulary("" if train else str(path or ""))
                or ("heads drafter.train trims (vocab_size / vocab_file)" if train.get("vocab_size") or train.get("vocab_file")
                    else None)):
            raise ValueError(f"search {job.search} picks rows of a full-vocabulary EAGLE head's LM head, and "
                             f"drafter.path={reason}: give such a head (specsparse train-drafter without "
                             "--vocab-size), or train one at the searched k with --vocab-file")
        trained = None if train else trained_ids(str(path or ""))
        if not trained or job.measured_ids is None:  # a Hub set's ids are not built-in ones
            return
        if overlap := len(trained & job.measured_ids):
            limit = "" if job.domain_limit is None else f" --limit {job.domain_limit}"
            raise ValueError(f"drafter.path={path} was trained on {overlap} of the {len(job.measured_ids)} {job.domain} "
                             f"prompts this job measures (calibration and test): train a head without them, "
                             f"`specsparse train-drafter --model {job.model_source} --output NEW_DIR --held-out "
                             f"{job.domain}{limit}`, or give drafter.train (the job then trains one without them)")

    @property
    def training_responses(self) -> Path | None:
        """The replies the head was trained on (`responses.jsonl` beside a checkpoint `specsparse
        train-drafter` wrote): the vocabulary paper's corpus. None for other checkpoints."""
        path = getattr(self, "checkpoint", None)
        return None if path is None or not (path / "responses.jsonl").is_file() else path / "responses.jsonl"

    @property
    def vocab_size(self) -> int:
        """Rows of the LM head it drafts with."""
        return self.head.draft_vocab_size if self.draft_to_target is None else len(self.draft_to_target)

    def head_shape(self) -> tuple[int, int, float]:
        body = sum(p.numel() for name, p in self.head.named_parameters() if not name.startswith("lm_head"))
        vocab, hidden = self.target.get_output_embeddings().weight.shape
        return vocab, hidden, 2.0 * body

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Target token ids of draft-vocabulary rows."""
        return draft_ids if self.draft_to_target is None else self.draft_to_target[draft_ids]

    @property
    def feature_size(self) -> int:
        """Width of the target features the head reads per token."""
        return self.head.target_hidden_size * len(self.feature_layers)

    @property
    def feature_dtype(self) -> torch.dtype:
        return self.head.fc.weight.dtype

    @property
    def cost_key(self) -> str:
        config = self.head.config
        shape = f"eagle:{self.head.layout}:h{config.hidden_size}:i{config.intermediate_size}"
        if not self.drafts_trees:  # chains: the body's time, the LM head priced per row (`head_calls`)
            return f"{shape}:chain-body"
        return f"{shape}:v{self.vocab_size}:tree{self.tree}:choices{self.tree_choices}"

    def head_calls(self, k: int) -> int | None:
        return None if self.drafts_trees else k  # a chain evaluates the head once per drafted token

    def replay_drafters(self, prompts, continuations, batch_size, skip_layers=()) -> list[Drafter]:
        """Drafters fed with the (sparse) target's features of prompt + continuation, computed in one
        forward per sequence, as the engine's verification forwards would give them (up to float
        summation order)."""
        drafters: list[Drafter] = []
        with torch.inference_mode():
            for prompt, continuation in zip(prompts, continuations):
                session = ModelSession(self.target, tuple(skip_layers), self.feature_layers)
                session.hidden_states([*prompt, *continuation])
                drafter = EagleDrafter(self.head, self.target, self.tree, self.vocab_ids, self.tree_choices)
                drafters.append(FeatureReplayDrafter(drafter, session.features))
        return drafters

    def begin(self, prompt_ids: list[int]) -> None:
        self.context = list(prompt_ids)
        self.cache = SkipAwareCache(self.head.config)
        self.pending: list[torch.Tensor] = []  # target features of context positions not yet in the head cache
        self.done = 0  # context positions whose (feature, next token) pair is in the head cache
        self.last_state: torch.Tensor | None = None  # predicted feature of the last context token

    def observe_features(self, features: torch.Tensor) -> None:
        self.pending.append(features)

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits) -> None:
        self.context.extend(committed)

    def close(self) -> None:
        self.cache = None
        self.pending = []

    def _catch_up(self) -> torch.Tensor | None:
        """Drop the drafts' head states, read the new target features; return the predicted feature
        [h] of the last context token (None before any feature arrived)."""
        self.cache.crop_to(self.done)
        if self.pending:
            features = torch.cat(self.pending)
            self.pending = []
            count = len(features)
            states = self.head.fuse(features.to(self.head.fc.weight.dtype))
            tokens = torch.tensor(self.context[self.done + 1 : self.done + 1 + count], device=features.device)
            positions = torch.arange(self.done, self.done + count, device=features.device)
            hidden = self.head(states[None], self.embedding(tokens)[None], positions[None], self.cache)
            self.done += count
            self.last_state = hidden[0, -1]
        return self.last_state

    def propose(self, k: int) -> Proposal:
        with torch.inference_mode():
            state = self._catch_up()
            if state is None or k <= 0:
                return Proposal([])
            if self.drafts_trees:
                return self._propose_tree(state, k)
            tokens: list[int] = []
            for depth in range(k):
                token = int(self.target_ids(self.head.logits(state, self.draft_head).argmax()))
                tokens.append(token)
                if depth + 1 == k:
                    break
                position = torch.tensor([[self.done + depth]], device=state.device)
                embedded = self.embedding(torch.tensor([[token]], device=state.device))
                state = self.head(state[None, None], embedded, position, self.cache)[0, -1]
        return Proposal(tokens)

    def _propose_tree(self, root_state: torch.Tensor, depth_limit: int) -> Proposal:
        """A dynamic (EAGLE-2) or static (`tree_choices`) tree, depth by depth, parents before children."""
        device = root_state.device
        tokens: list[int] = []
        parents: list[int] = []
        scores: list[float] = []
        ranks: list[tuple[int, ...]] = []  # each node's path of child ranks from the root (static trees)
        states = {-1: root_state}  # predicted features of the nodes run through the head (-1: the root)
        run: list[int] = []  # nodes in the head cache after the context, in cache order
        frontier = [-1]
        for depth in range(1, depth_limit + 1):
            path = lambda node: () if node < 0 else ranks[node]  # noqa: E731
            if self.tree_choices is None:
                children = {f: range(self.tree[0]) for f in frontier}
            else:
                children = {f: sorted(c[-1] for c in self.tree_choices if len(c) == depth and c[:-1] == path(f))
                            for f in frontier}
            width = max((max(r) + 1 for r in children.values() if r), default=0)
            if width == 0:
                break
            logits = self.head.logits(torch.stack([states[n] for n in frontier]), self.draft_head)
            best, ids = torch.log_softmax(logits, dim=-1).topk(min(width, logits.shape[-1]), dim=-1)
            first_new = len(tokens)
            for f, node in enumerate(frontier):
                base = 0.0 if node < 0 else scores[node]
                for j in children[node]:
                    if j < ids.shape[1]:
                        tokens.append(int(self.target_ids(ids[f, j])))
                        parents.append(node)
                        scores.append(base + float(best[f, j]))
                        ranks.append((*path(node), j))
            new = list(range(first_new, len(tokens)))
            if depth == depth_limit or not new:
                break
            if self.tree_choices is None:  # expand the top_k best new nodes
                frontier = sorted(new, key=lambda i: -scores[i])[: self.tree[0]]
            else:  # expand the new nodes the choice list continues
                frontier = [i for i in new if any(len(c) > depth and tuple(c[:depth]) == ranks[i]
                                                  for c in self.tree_choices)]
            if not frontier:
                break
            # Run the frontier: each node reads its parent's predicted feature and its own token,
            # at the position after its parent, seeing the context and its ancestors' head states.
            visible = torch.zeros(len(frontier), self.done + len(run) + len(frontier), dtype=torch.bool)
            visible[:, : self.done] = True
            for q, node in enumerate(frontier):
                visible[q, self.done + len(run) + q] = True
                parent = parents[node]
                while parent >= 0:
                    visible[q, self.done + run.index(parent)] = True
                    parent = parents[parent]
            outputs = self.head(
                torch.stack([states[parents[n]] for n in frontier])[None],
                self.embedding(torch.tensor([[tokens[n] for n in frontier]], device=device)),
                torch.tensor([[self.done + depth - 1] * len(frontier)], device=device),
                self.cache, visible[None, None].to(device),
            )[0]
            states.update(zip(frontier, outputs))
            run += frontier
        if self.tree_choices is not None:
            return Proposal.tree(tokens, parents)
        # The `total` best nodes; a child never scores above its parent, so they form a tree (ties
        # keep the earlier node, the parent, first).
        keep = sorted(sorted(range(len(tokens)), key=lambda i: -scores[i])[: self.tree[1]])
        index = {old: new for new, old in enumerate(keep)}
        keep = [i for i in keep if parents[i] < 0 or parents[i] in index]
        index = {old: new for new, old in enumerate(keep)}
        return Proposal.tree([tokens[i] for i in keep], [index.get(parents[i], -1) for i in keep])


def _check_choices(choices: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """A static tree's choice list: paths of child ranks, each path's prefixes listed too."""
    paths = [tuple(int(r) for r in c) for c in choices]
    if not paths or any(not p or min(p) < 0 for p in paths):
        raise ValueError("eagle tree_choices must be non-empty paths of child ranks >= 0, e.g. [[0], [1], [0, 0]]")
    missing = [list(p) for p in paths if len(p) > 1 and p[:-1] not in set(paths)]
    if missing:
        raise ValueError(f"eagle tree_choices {missing[:3]} continue paths that are not listed: list every prefix")
    return paths


class FeatureReplayDrafter(Drafter):
    """An EAGLE drafter replayed over a known continuation: it is given the target's features of
    each context position from `features` [prompt + continuation, F], as the engine would give them."""

    name = "eagle_replay"

    def __init__(self, drafter: EagleDrafter, features: torch.Tensor):
        self.drafter = drafter
        self.features = features
        self.drafts_trees = drafter.drafts_trees

    def begin(self, prompt_ids: list[int]) -> None:
        self.drafter.begin(prompt_ids)
        self.length = len(prompt_ids)
        self.drafter.observe_features(self.features[: self.length - 1])

    def propose(self, k: int) -> Proposal:
        return self.drafter.propose(k)

    def observe(self, committed: list[int], verified_ids: list[int], verified_logits) -> None:
        # The step's kept inputs: the last context token and the accepted drafts.
        self.drafter.observe_features(self.features[self.length - 1 : self.length - 1 + len(committed)])
        self.length += len(committed)
        self.drafter.observe(committed, verified_ids, verified_logits)

    def close(self) -> None:
        self.drafter.close()
