"""Engine forward variants side by side in one process: float32 eager, float32 on the fast path (the CPU
default: linear maps on weights packed for oneDNN), bfloat16 eager, and float32 eager with every decoder
layer compiled (`torch.compile(dynamic=True)`).

    python scripts/bench_dtype_compile.py [--prompts 4] [--max-new-tokens 48] [--repeats 3]

For each variant: plain decoding and prompt lookup (pld) through the engine on the same built-in
translation and summarization prompts, variants interleaved prompt by prompt, tokens/s = new tokens /
wall time, median over repeats. Lossless: the variant's pld output equals HF `generate` greedy output
of the same model and dtype (its own dtype's greedy output), prompt by prompt.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from specsparse.data import build_messages, get_domain, load_examples
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.generation import encode_messages
from specsparse.decoding.models import load_model
from specsparse.drafters import PromptLookupDrafter
from specsparse.types import GenerationConfig


def hf_greedy(loaded, ids: list[int], max_new_tokens: int) -> list[int]:
    inputs = torch.tensor([ids])
    eos = list(loaded.eos_token_ids)
    with torch.inference_mode():
        out = loaded.model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=max_new_tokens,
                                    do_sample=False, eos_token_id=eos, pad_token_id=eos[0])
    return out[0, len(ids):].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=4, help="per domain (translation, summarization)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = {"float32": load_model(args.model, dtype="float32", forward_path="eager"),
                "float32_fast": load_model(args.model, dtype="float32", forward_path="fast"),
                "bfloat16": load_model(args.model, dtype="bfloat16"),
                "float32_compiled": load_model(args.model, dtype="float32", forward_path="eager")}
    start = time.perf_counter()
    for layer in variants["float32_compiled"].model.model.layers:
        layer.compile(dynamic=True)
    tokenizer = variants["float32"].tokenizer
    prompts = [encode_messages(tokenizer, build_messages(get_domain(d), ex, 0))
               for d in ("translation", "summarization") for ex in load_examples(d, limit=args.prompts)]
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, num_draft_tokens=5)
    methods = {"plain": lambda: None, "pld": lambda: PromptLookupDrafter(max_ngram_size=3)}

    def run(name: str, method: str, ids: list[int]):
        loaded = variants[name]
        return speculative_generate(loaded.model, ids, methods[method](), config, (), loaded.eos_token_ids)

    for name in variants:  # warm-up (and the compiled variant's compilation)
        for method in methods:
            run(name, method, prompts[0])
    print(f"warm-up incl. compilation: {time.perf_counter() - start:.0f} s")
    rates = {(n, m): [] for n in variants for m in methods}
    outputs = {(n, m): [] for n in variants for m in methods}
    for repeat in range(args.repeats):
        tokens = dict.fromkeys(rates, 0)
        seconds = dict.fromkeys(rates, 0.0)
        for ids in prompts:
            for key in (rates if repeat % 2 == 0 else list(rates)[::-1]):
                result = run(*key, ids)
                tokens[key] += result.new_tokens
                seconds[key] += result.wall_time_s
                if repeat == 0:
                    outputs[key].append(list(result.new_token_ids))
        for key in rates:
            rates[key].append(tokens[key] / seconds[key])
    base = statistics.median(rates[("float32", "plain")])
    print("| variant | method | tokens/s | vs float32 plain | lossless (== HF greedy, own dtype) |")
    print("|---|---|---|---|---|")
    references = {name: [hf_greedy(loaded, ids, args.max_new_tokens) for ids in prompts]
                  for name, loaded in variants.items()}
    for (name, method), values in rates.items():
        reference = references[name]
        same = sum(o == r for o, r in zip(outputs[(name, method)], reference))
        rate = statistics.median(values)
        print(f"| {name} | {method} | {rate:.1f} | {rate / base:.2f}x | {same}/{len(prompts)} prompts |")


if __name__ == "__main__":
    main()
