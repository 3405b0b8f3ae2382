"""EAGLE drafters: a one-layer head that drafts from the target's own hidden states (features).

At context position j the head reads the target's feature f_j of token x_j and the embedding of the
next token x_{j+1}, and predicts the feature of x_{j+1}; the LM head turns a predicted feature into
the next draft token. Drafting goes on from the head's own predicted features. After each
verification the drafts' head states are dropped and the head reads the target's real features of
the accepted tokens, so its cache always holds (target feature, token) pairs of the committed context.
With target-side skipping the features are those of the sparse target (the session records them).

Two checkpoint layouts (`load_eagle_head`):
- "eagle" (EAGLE-1 / EAGLE-2): features are the target's final-norm hidden states; fc maps
  [embedding, feature] (2h) to h; one Llama decoder layer without its input norm; logits come from
  the target's own LM head.
- "eagle3" (EAGLE-3): features are the residual streams entering three target layers (low, middle,
  high), fused by fc (3h -> h); the decoder layer's attention reads [norm(embedding), norm(hidden)]
  (2h); the head has its own final norm and LM head over a draft vocabulary, mapped to target ids
  by `d2t` (target id = draft id + d2t[draft id]).

Either layout may carry `d2t`: a trimmed draft vocabulary (`specsparse train-drafter --vocab-size`).
Proposals are chains, EAGLE-2's dynamic trees (`tree`) or static trees (`tree_choices`); see
`EagleDrafter`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from specsparse.decoding.drafter import Drafter, Proposal
from specsparse.decoding.session import ModelSession
from specsparse.decoding.skipping import FINAL_HIDDEN, SkipAwareCache
from specsparse.util import atomic_write_text, checkpoint_sha256

LAYOUTS = ("eagle", "eagle3")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class EagleLoadError(ValueError):
    """An EAGLE checkpoint that cannot be used with this target; the message says why and what to do."""


def eagle3_feature_layers(num_target_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's fused target layers: the streams entering layers 2, L // 2 and L - 3."""
    return (2, num_target_layers // 2, num_target_layers - 3)


class EagleHead(nn.Module):
    """The trainable part of an EAGLE drafter (the embedding, and for "eagle" the LM head, are the
    target's). `draft_to_target`: the target id of each draft-vocabulary row, or None (full vocabulary)."""

    def __init__(
        self,
        config: LlamaConfig,
        layout: str = "eagle",
        feature_layers: Sequence[int] = (FINAL_HIDDEN,),
        target_hidden_size: int | None = None,
        fc_bias: bool = False,
        draft_to_target: torch.Tensor | None = None,
    ):
        super().__init__()
        if layout not in LAYOUTS:
            raise EagleLoadError(f"unknown EAGLE layout {layout!r}: use one of {LAYOUTS}")
        config._attn_implementation = "sdpa"
        self.config = config
        self.layout = layout
        self.feature_layers = tuple(feature_layers)
        hidden = config.hidden_size
        target_hidden = target_hidden_size or hidden
        self.target_hidden_size = target_hidden
        self.fc = nn.Linear(
            (hidden + target_hidden) if layout == "eagle" else len(self.feature_layers) * target_hidden,
            hidden, bias=fc_bias,
        )
        self.self_attn = LlamaAttention(config, layer_idx=0)
        if layout == "eagle3":  # attention reads [norm(embedding), norm(hidden)]
            heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
            head_dim = getattr(config, "head_dim", None) or hidden // heads
            bias = config.attention_bias
            self.self_attn.q_proj = nn.Linear(2 * hidden, heads * head_dim, bias=bias)
            self.self_attn.k_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=bias)
            self.self_attn.v_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=bias)
            self.input_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
            self.hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
            self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config)
        self.rotary_emb = LlamaRotaryEmbedding(config)
        vocab = config.vocab_size if draft_to_target is None else len(draft_to_target)
        if layout == "eagle3":
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.register_buffer("draft_to_target", None if draft_to_target is None else draft_to_target.long())

    @property
    def draft_vocab_size(self) -> int:
        return self.config.vocab_size if self.draft_to_target is None else len(self.draft_to_target)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The head's input state from target features [n, F] ("eagle" keeps them: fc takes the
        embedding too, in `forward`)."""
        return features if self.layout == "eagle" else self.fc(features)

    def forward(
        self,
        states: torch.Tensor,
        embeddings: torch.Tensor,
        positions: torch.Tensor,
        cache: SkipAwareCache | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Predicted features [batch, n, h] of the tokens after the inputs.

        states: [batch, n, h] the features of the input tokens (`fuse`d target features, or the
        head's own predictions); embeddings: [batch, n, h] those of the next tokens; positions:
        [batch, n]; mask: bool [batch, 1, n, keys] (None: causal within the chunk after the cache)."""
        if self.layout == "eagle":
            residual = x = self.fc(torch.cat([embeddings, states], dim=-1))
        else:
            residual = states
            x = torch.cat([self.input_layernorm(embeddings), self.hidden_norm(states)], dim=-1)
        if mask is None and x.shape[1] > 1:
            past = 0 if cache is None else cache.get_seq_length()
            keys = torch.arange(past + x.shape[1], device=x.device)
            mask = (keys[None, :] <= (past + torch.arange(x.shape[1], device=x.device))[:, None])[None, None]
        attention, _ = self.self_attn(x, position_embeddings=self.rotary_emb(x, positions), attention_mask=mask,
                                      cache=cache)
        hidden = residual + attention
        return hidden + self.mlp(self.post_attention_layernorm(hidden))

    def head_weight(self, target_head: torch.Tensor) -> torch.Tensor | None:
        """The LM head rows "eagle" drafts with: the target's, trimmed to the draft vocabulary
        (None for "eagle3", which has its own head)."""
        if self.layout == "eagle3":
            return None
        return target_head if self.draft_to_target is None else target_head[self.draft_to_target].contiguous()

    def logits(self, hidden: torch.Tensor, head_weight: torch.Tensor | None) -> torch.Tensor:
        """Float logits over the draft vocabulary from predicted features [..., h] (`head_weight`:
        from `head_weight`, or rows of an EAGLE-3 head's own LM head)."""
        if self.layout == "eagle3":  # its own head, or rows of it (a vocabulary trimmed after training)
            return nn.functional.linear(self.norm(hidden), self.lm_head.weight if head_weight is None else head_weight).float()
        return nn.functional.linear(hidden, head_weight).float()

    def save(self, directory: str | Path) -> None:
        """Safetensors weights and a config.json in the EAGLE layout's key names (`load_eagle_head`
        reads them back; d2t/t2d as EAGLE-3 stores its draft vocabulary)."""
        from safetensors.torch import save_file  # noqa: PLC0415

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {name: tensor.detach().contiguous() for name, tensor in _to_checkpoint_keys(self).items()}
        partial = directory / "model.safetensors.partial"  # config.json, written last, marks a whole checkpoint
        save_file(state, str(partial))
        partial.replace(directory / "model.safetensors")
        config = self.config.to_dict()
        config.update(
            eagle_layout=self.layout, bias=self.fc.bias is not None, draft_vocab_size=self.draft_vocab_size,
            target_hidden_size=self.target_hidden_size,
            eagle_config={"eagle_aux_hidden_state_layer_ids": list(self.feature_layers)},
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
    """Why the local checkpoint at `source` drafts from a trimmed vocabulary of its own (a head trained
    trimmed, as official EAGLE-3 heads are), so that a searched one cannot replace it; None when it
    can (a full-vocabulary head of either layout), or when there is no local checkpoint yet. Reads
    tensor names only."""
    directory = Path(source).expanduser()
    weights = next((directory / n for n in WEIGHT_FILES if (directory / n).is_file()), None)
    if weights is None:
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


def _cached_head(source: str, model: PreTrainedModel) -> EagleHead:
    """The head at `source` for `model`, loaded once per process (kept on the model, keyed by the
    checkpoint's file hashes so a retrained one loads anew)."""
    files = tuple(sorted(checkpoint_sha256(source).items())) if Path(source).is_dir() else ()
    heads = model.__dict__.setdefault("_specsparse_eagle_heads", {})
    if (source, files) not in heads:
        head = load_eagle_head(source, model.config, model.config.num_hidden_layers)
        heads[(source, files)] = head.to(device=model.device, dtype=model.dtype)
    return heads[(source, files)]


class EagleDrafter(Drafter):
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

    def __init__(self, head: EagleHead, target: PreTrainedModel, tree: Sequence[int] | None = None,
                 vocab_ids: Sequence[int] | None = None, tree_choices: Sequence[Sequence[int]] | None = None):
        self.head = head
        self.target = target
        self.embedding = target.get_input_embeddings()
        self.feature_layers = head.feature_layers
        target_head = target.get_output_embeddings().weight
        self.vocab_ids = None if vocab_ids is None else sorted({int(i) for i in vocab_ids})
        if self.vocab_ids is None:
            self.draft_to_target = head.draft_to_target
            self.head_weight = head.head_weight(target_head)
        else:  # a trimmed vocabulary chosen outside the checkpoint (search=tpe_vocab): rows of the LM head it
            # drafts with (the target's for EAGLE-1/2, its own for EAGLE-3)
            if head.draft_to_target is not None:
                raise ValueError("this head was trained with a trimmed vocabulary of its own (d2t): only a "
                                 "full-vocabulary head drafts from a vocabulary chosen after training")
            self.draft_to_target = torch.tensor(self.vocab_ids, device=target_head.device)
            rows = target_head if head.layout == "eagle" else head.lm_head.weight
            self.head_weight = rows[self.draft_to_target].contiguous()
        if tree is not None and (len(tree) != 2 or min(tree) < 1):
            raise ValueError(f"eagle tree must be [top_k, total_tokens] with both >= 1, got {list(tree)}")
        if tree is not None and tree_choices is not None:
            raise ValueError("give drafter.tree (dynamic) or drafter.tree_choices (static), not both")
        self.tree = None if tree is None else (int(tree[0]), int(tree[1]))
        self.tree_choices = None if tree_choices is None else _check_choices(tree_choices)
        self.drafts_trees = self.tree is not None or self.tree_choices is not None

    @classmethod
    def from_target(cls, target, vocab_ids=None, path: str = "", tree: Sequence[int] | None = None,
                    tree_choices: Sequence[Sequence[int]] | None = None, train: dict | None = None) -> EagleDrafter:
        """The head at `path` for `target`. With `train` (`TrainingRecipe` fields), `path` is a folder of
        trained heads keyed by target and recipe: the one this recipe makes is trained there first if
        missing (once; concurrent workers wait for it), and reused by every later job."""
        if not path:
            raise ValueError("drafter=eagle needs drafter.path=<EAGLE checkpoint directory or Hub id> "
                             "(`specsparse train-drafter` makes one)")
        if train is not None:
            from specsparse.drafters.eagle_training import recipe_from_options, trained_head  # noqa: PLC0415

            path = str(trained_head(target, path, recipe_from_options(train)))
        model = target.model
        drafter = cls(head=_cached_head(str(path), model), target=model, tree=tree, vocab_ids=vocab_ids,
                      tree_choices=tree_choices)
        drafter.checkpoint = Path(path)
        return drafter

    @classmethod
    def check_options(cls, path: str = "", tree: Sequence[int] | None = None,
                      tree_choices: Sequence[Sequence[int]] | None = None, train: dict | None = None) -> None:
        if train is not None:
            from specsparse.drafters.eagle_training import recipe_from_options  # noqa: PLC0415

            recipe_from_options(train)

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
                token = int(self.target_ids(self.head.logits(state, self.head_weight).argmax()))
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
            logits = self.head.logits(torch.stack([states[n] for n in frontier]), self.head_weight)
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
