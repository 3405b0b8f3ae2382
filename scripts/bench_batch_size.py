"""Batched greedy generation: tokens/s by batch size, and `generate_batch` against HF `generate` on the
same left-padded batch (what replay measurement spends its time in).

    python scripts/bench_batch_size.py [--prompts 64] [--max-new-tokens 16]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from specsparse.data import build_messages, get_domain, load_examples
from specsparse.decoding.batched import generate_batch
from specsparse.decoding.generation import encode_messages
from specsparse.decoding.models import load_model
from specsparse.types import GenerationConfig


def hf_generate_seconds(target, prompts, max_new_tokens: int) -> float:
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else target.eos_token_ids[0]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    start = time.perf_counter()
    with torch.inference_mode():
        target.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                              min_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()
    target = load_model(args.model, dtype="float32")
    domain = get_domain("qa")
    prompts = [encode_messages(target.tokenizer, build_messages(domain, ex, 0, []))
               for ex in load_examples("qa")[: args.prompts]]
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, stop_on_eos=False)
    generate_batch(target.model, prompts[:4], None, config, (), target.eos_token_ids, batch_size=4)  # warm-up
    print("| batch size | generate_batch tok/s |")
    print("|---|---|")
    for batch_size in (8, 16, 32, 64):
        start = time.perf_counter()
        results = generate_batch(target.model, prompts, None, config, (), target.eos_token_ids, batch_size=batch_size)
        seconds = time.perf_counter() - start
        print(f"| {batch_size} | {sum(r.new_tokens for r in results) / seconds:.1f} |", flush=True)
    batch = prompts[:16]
    start = time.perf_counter()
    generate_batch(target.model, batch, None, config, (), target.eos_token_ids, batch_size=16)
    ours = time.perf_counter() - start
    theirs = hf_generate_seconds(target, batch, args.max_new_tokens)
    print(f"16 prompts x {args.max_new_tokens} tokens: generate_batch {ours:.2f} s, HF generate {theirs:.2f} s, "
          f"ratio {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
