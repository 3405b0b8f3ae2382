"""The EAGLE head: one decoder layer that predicts the target's feature of the next token from the
target's feature of the current one and the next token's embedding (drafting with it: drafter.py).

Two layouts:
- "eagle" (EAGLE-1 / EAGLE-2): features are the target's final-norm hidden states; fc maps
  [embedding, feature] (2h) to h; one Llama decoder layer without its input norm; logits come from
  the target's own LM head.
- "eagle3" (EAGLE-3): features are the residual streams entering three target layers (low, middle,
  high), fused by fc (3h -> h); the decoder layer's attention reads [norm(embedding), norm(hidden)]
  (2h); the head has its own final norm and LM head over a draft vocabulary, mapped to target ids
  by `d2t` (target id = draft id + d2t[draft id]).

Either layout may carry `d2t`: a trimmed draft vocabulary (`specsparse train-drafter --vocab-size`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from specsparse.decoding.skipping import FINAL_HIDDEN, SkipAwareCache

LAYOUTS = ("eagle", "eagle3")



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

    def logits(self, hidden: torch.Tensor, head: nn.Module | None = None) -> torch.Tensor:
        """Float logits over the draft vocabulary from predicted features [..., h]. head: hidden ->
        logits (rows of the target's LM head, or of an EAGLE-3 head's own); None: an EAGLE-3 head's own."""
        if self.layout == "eagle3":
            hidden = self.norm(hidden)
        return (self.lm_head if head is None else head)(hidden).float()


def head_config(target_config) -> LlamaConfig:
    """One decoder layer shaped like the target's (EAGLE's head), same vocabulary and rotary embedding."""
    fields = target_config.to_dict()
    fields.update(num_hidden_layers=1, tie_word_embeddings=False)
    for key in ("architectures", "layer_types", "auto_map", "_name_or_path", "model_type"):
        fields.pop(key, None)
    return LlamaConfig(**fields)
