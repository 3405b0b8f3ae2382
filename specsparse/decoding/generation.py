"""Text in, text out: chat template + speculative engine + decoding. Measurement, side-by-side
timing, the runtime controller and the library API all generate through `generate_text`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specsparse.decoding.drafter import Drafter
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.models import LoadedModel
from specsparse.types import GenerationConfig, GenerationResult


def encode_messages(tokenizer, messages: Sequence[dict] | str) -> list[int]:
    """Token ids of a conversation, ending with the assistant's turn.

    Instruct models get their chat template; a tokenizer without one gets the turns' contents joined
    by blank lines (base models). A plain string is one user message.
    """
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if getattr(tokenizer, "chat_template", None):
        return list(tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, return_dict=False))
    text = "\n\n".join(message["content"] for message in messages)
    return tokenizer(text, add_special_tokens=True).input_ids


def generate_text(
    target: LoadedModel,
    messages: Sequence[dict] | str,
    drafter: Drafter | None = None,
    config: GenerationConfig = GenerationConfig(),
    skip_layers: Sequence[int] = (),
    on_step: Callable[[Sequence[int]], bool | None] | None = None,
) -> tuple[str, GenerationResult]:
    """Generate the assistant's reply; returns (text without special tokens, statistics).
    on_step: called with the tokens each verification step commits (streaming); True ends generation."""
    prompt_ids = encode_messages(target.tokenizer, messages)
    result = speculative_generate(
        target.model, prompt_ids, drafter, config, skip_layers=skip_layers, eos_token_ids=target.eos_token_ids,
        on_step=on_step,
    )
    return target.tokenizer.decode(result.new_token_ids, skip_special_tokens=True), result
