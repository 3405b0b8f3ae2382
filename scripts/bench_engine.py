"""Engine benchmark: our speculative engine vs HF transformers `generate`, in one run, same model,
prompts and dtype. Writes a Markdown table (BENCHMARKS.md section, also saved next to the JSON) and
a JSON file with every prompt's timings.

    python scripts/bench_engine.py                                   # built-in sets (summarization + translation)
    python scripts/bench_engine.py --spec-bench ../shared/data/spec_bench/question.jsonl --per-category 2

With --spec-bench, N prompts are drawn from every Spec-Bench category (the first N after a shuffle
seeded by --seed and the category), and each is run on its first turn.

With --llama-lookup (llama.cpp's `llama-lookup` binary) and --gguf (the same weights as a GGUF), two more
methods run in the same rounds: llama.cpp's prompt lookup (`llamacpp_lookup`, --k draft tokens) and its
greedy decoding (`llamacpp_greedy`: the same binary drafting nothing), each on the prompt's exact text
(special tokens parsed), timed by llama.cpp's own prompt-encoding plus decoding seconds (its model load
left out), their replies re-tokenized with our tokenizer to compare with HF greedy's.

Every method runs every prompt once per repeat, interleaved prompt by prompt (in alternating order), so
machine noise hits them alike. tokens/s is total new tokens / total wall time over all prompts and
repeats; every ratio of two methods has a 95% paired bootstrap interval over prompts (the same prompt
draws for both methods; each prompt's tokens and seconds pooled over repeats).

The runs are saved after every prompt (<output stem>.runs.json, removed at the end); after a kill,
the same command with --resume runs only the prompts still missing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from specsparse.data import SPEC_BENCH_CATEGORIES, build_messages, get_domain, load_examples
from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.generation import encode_messages
from specsparse.decoding.models import load_model
from specsparse.drafters import (
    PromptLookupDrafter,
    SelfSkipDrafter,
    SuffixAutomatonDrafter,
    TokenRecyclingDrafter,
)
from specsparse.measuring.intervals import DRAWS, Interval
from specsparse.types import GenerationConfig

BUILTIN_DOMAINS = ("summarization", "translation")


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: its example id, category (Spec-Bench category or built-in domain),
    Spec-Bench question_id (None for built-in sets) and the token ids of its first turn."""

    id: str
    category: str
    question_id: int | None
    ids: tuple[int, ...]


@dataclass(frozen=True)
class Run:
    """One method on one prompt: the new tokens, wall seconds, accept lengths (None for HF), the
    seconds spent in model forwards (None for HF) and the process's CPU seconds (a check that does not
    count the time other processes held the cores)."""

    tokens: list[int]
    seconds: float
    accept_lengths: list[int] | None = None
    forward_seconds: float | None = None
    cpu_seconds: float | None = None


def spec_bench_prompts(tokenizer, path: str, per_category: int, seed: int, categories: list[str] | None) -> list[Prompt]:
    """`per_category` prompts of every Spec-Bench category (or of `categories`), in file order of the
    categories and by question_id within one: the first `per_category` after a shuffle seeded by
    (seed, category), so adding a category does not change another's draw."""
    by_category: dict[str, list[tuple[str, object]]] = {}
    for domain_name in SPEC_BENCH_CATEGORIES:
        for example in load_examples(domain_name, "spec_bench", path):
            _, category, _ = example.id.rsplit("-", 2)
            by_category.setdefault(category, []).append((domain_name, example))
    if categories:
        missing = sorted(set(categories) - set(by_category))
        if missing:
            raise SystemExit(f"no Spec-Bench prompts of categories {missing} in {path}; found {sorted(by_category)}")
        by_category = {c: by_category[c] for c in categories}

    def question_id(example) -> int:
        return int(example.id.rsplit("-", 1)[1])

    prompts = []
    for category, rows in sorted(by_category.items(), key=lambda item: min(question_id(e) for _, e in item[1])):
        rows = sorted(rows, key=lambda row: question_id(row[1]))
        random.Random(f"{seed}:{category}").shuffle(rows)
        for domain_name, example in sorted(rows[:per_category], key=lambda row: question_id(row[1])):
            ids = encode_messages(tokenizer, build_messages(get_domain(domain_name), example, 0))
            prompts.append(Prompt(example.id, category, question_id(example), tuple(ids)))
    return prompts


def builtin_prompts(tokenizer, per_domain: int) -> list[Prompt]:
    """The first `per_domain` examples of the built-in summarization and translation sets."""
    prompts = []
    for name in BUILTIN_DOMAINS:
        for example in load_examples(name, limit=per_domain):
            ids = encode_messages(tokenizer, build_messages(get_domain(name), example, 0))
            prompts.append(Prompt(example.id, name, None, tuple(ids)))
    return prompts


def build_methods(loaded, eager, args) -> dict[str, Callable[[tuple[int, ...]], Run]]:
    """Every method by name: a function from prompt ids to its `Run`. Ours run on `loaded` (on
    --forward-path); HF's and `ours_dense_eager` on `eager`, the same weights as transformers runs them."""
    model, eos = loaded.model, loaded.eos_token_ids
    vocab = model.config.vocab_size
    skip = parse_layers(args.skip)
    lo, hi = (int(x) for x in args.self_skip.split("-"))
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, num_draft_tokens=args.k)
    adaptive = replace(config, draft_length="adaptive", verify_cost_per_token=args.verify_cost_per_token)

    def ours(make_drafter=None, skip_layers=(), config=config, model=model):
        def run(ids):
            drafter = make_drafter() if make_drafter else None
            r = speculative_generate(model, list(ids), drafter, config, skip_layers, eos)
            return Run(list(r.new_token_ids), r.wall_time_s, list(r.accept_lengths), r.prefill_time_s + r.verify_time_s)
        return run

    def hf(**kwargs):
        def run(ids):
            inputs = torch.tensor([ids])
            start = time.perf_counter()
            with torch.inference_mode():
                out = eager.model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=args.max_new_tokens,
                                     do_sample=False, eos_token_id=list(eos), pad_token_id=eos[0], **kwargs)
            return Run(out[0, len(ids):].tolist(), time.perf_counter() - start)
        return run

    def pld(branches=1):
        return lambda: PromptLookupDrafter(max_ngram_size=3, branches=branches)

    def samd(tree=()):
        return lambda: SuffixAutomatonDrafter(min_match=2, fallback=TokenRecyclingDrafter(vocab, tree=tree))

    n = len(skip)
    return {
        "hf_greedy": hf(),
        "ours_dense": ours(),
        "ours_dense_eager": ours(model=eager.model),
        "hf_prompt_lookup": hf(prompt_lookup_num_tokens=args.k, max_matching_ngram_size=3),
        "ours_pld": ours(pld()),
        "ours_pld_adaptive": ours(pld(), config=adaptive),
        "ours_samd": ours(samd()),
        "ours_samd_adaptive": ours(samd(), config=adaptive),
        "ours_recycling": ours(lambda: TokenRecyclingDrafter(vocab)),
        "ours_pld_tree": ours(pld(branches=2)),
        "ours_recycling_tree": ours(lambda: TokenRecyclingDrafter(vocab, tree=(2,))),
        "ours_samd_tree": ours(samd(tree=(2,))),
        "ours_self_skip": ours(lambda: SelfSkipDrafter(model, skip_layers=range(lo, hi + 1))),
        f"ours_dense_skip{n}": ours(None, skip),
        f"ours_samd_skip{n}": ours(samd(), skip),
    }


def llama_cpp_lookup(binary: str, gguf: str, tokenizer, max_new_tokens: int, draft: int,
                     threads: int) -> Callable[[tuple[int, ...]], Run]:
    """llama.cpp's prompt lookup with `draft` tokens (0: its greedy decoding) as a method: the prompt's
    text goes to `llama-lookup` in a file, the reply is what follows it on stdout up to the end-of-turn
    token, and the seconds are its own "encoded" plus "decoded" times."""
    eos = tokenizer.convert_ids_to_tokens(tokenizer.eos_token_id)

    def run(ids: tuple[int, ...]) -> Run:
        text = tokenizer.decode(ids, skip_special_tokens=False)
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as prompt_file:
            prompt_file.write(text)
            prompt_file.flush()
            done = subprocess.run([binary, "-m", gguf, "-f", prompt_file.name, "-n", str(max_new_tokens), "--temp", "0",
                                   "--spec-draft-n-max", str(draft), "-t", str(threads), "-c", "4096"],
                                  capture_output=True, text=True, check=True)
        seconds = sum(float(m) for m in re.findall(r"(?:en|de)coded +\d+ tokens in +([\d.]+) seconds", done.stderr))
        reply = done.stdout[done.stdout.index(text) + len(text):] if text in done.stdout else done.stdout
        ended = eos in reply
        tokens = tokenizer(reply.split(eos)[0], add_special_tokens=False).input_ids
        return Run(tokens[:max_new_tokens] + ([tokenizer.eos_token_id] if ended else []), seconds)
    return run


def parse_layers(text: str) -> tuple[int, ...]:
    return tuple(int(i) for i in text.split(",") if i)


def reference_of(name: str) -> str | None:
    """The method whose output `name` must reproduce token for token: the dense sparse target for a
    drafter on a sparse target, HF greedy for every other method on the dense model; None for a
    sparse dense target (a different model)."""
    sparse = re.fullmatch(r"ours_(\w+)_skip(\d+)", name)
    if sparse is None:
        return "hf_greedy"
    return None if sparse[1] == "dense" else f"ours_dense_skip{sparse[2]}"


# The ratios reported, numerator over denominator (tokens/s); those whose methods did not run are left out.
RATIOS = (
    ("ours_dense", "hf_greedy"),
    ("ours_dense", "ours_dense_eager"),
    ("ours_pld", "ours_dense"),
    ("ours_samd", "ours_dense"),
    ("hf_prompt_lookup", "hf_greedy"),
    ("ours_pld", "hf_prompt_lookup"),
    ("ours_pld_adaptive", "hf_prompt_lookup"),
    ("ours_pld_adaptive", "ours_pld"),
    ("ours_samd", "hf_greedy"),
    ("ours_samd", "hf_prompt_lookup"),
    ("ours_samd_adaptive", "hf_prompt_lookup"),
    ("ours_pld_tree", "ours_pld"),
    ("ours_recycling_tree", "ours_recycling"),
    ("ours_samd_tree", "ours_samd"),
    ("ours_dense_skip{n}", "ours_dense"),
    ("llamacpp_lookup", "llamacpp_greedy"),
    ("ours_dense", "llamacpp_greedy"),
    ("ours_pld", "llamacpp_lookup"),
    ("ours_samd", "llamacpp_lookup"),
)
OVERHEAD = "engine wall / model forwards (ours_dense)"


def run_all(
    methods, prompts: list[Prompt], repeats: int, checkpoint: Path, settings: dict, resume: bool = False
) -> list[list[dict[str, Run]]]:
    """Every method on every prompt, `repeats` times, interleaved prompt by prompt in alternating order.

    Returns runs[repeat][prompt][method]. After every prompt the runs so far are saved to `checkpoint`;
    with `resume`, the checkpoint's runs (same prompts, methods and `settings`) are kept and only the
    missing prompts run (all methods of one prompt run in the same minutes, so pairing holds across
    a restart).
    """
    done = load_checkpoint(checkpoint, prompts, methods, settings) if resume else {}
    if done:
        print(f"resuming from {checkpoint}: {len(done)} of {repeats * len(prompts)} prompt runs done", file=sys.stderr)
    for run in methods.values():  # warm-up
        run(prompts[0].ids)
    for repeat in range(repeats):
        for i, prompt in enumerate(prompts):
            if f"{repeat}:{i}" in done:
                continue
            order = list(methods) if (i + repeat) % 2 == 0 else list(reversed(methods))  # ABBA: drift hits all alike
            done[f"{repeat}:{i}"] = {name: with_cpu_time(methods[name], prompt.ids) for name in order}
            save_checkpoint(checkpoint, prompts, methods, settings, done)
            print(f"repeat {repeat + 1}/{repeats}, prompt {i + 1}/{len(prompts)} ({prompt.id}) done", file=sys.stderr)
    return [[done[f"{repeat}:{i}"] for i in range(len(prompts))] for repeat in range(repeats)]


def with_cpu_time(method: Callable[[tuple[int, ...]], Run], ids: tuple[int, ...]) -> Run:
    """`method`'s run with the CPU seconds it took, its child processes' included (llama.cpp's)."""
    def cpu() -> float:
        times = os.times()
        return time.process_time() + times.children_user + times.children_system
    start = cpu()
    run = method(ids)
    return replace(run, cpu_seconds=cpu() - start)


def _checkpoint_key(prompts: list[Prompt], methods, settings: dict) -> dict:
    return {"prompts": [p.id for p in prompts], "methods": sorted(methods), "settings": settings}


def load_checkpoint(path: Path, prompts: list[Prompt], methods, settings: dict) -> dict[str, dict[str, Run]]:
    """The runs saved in `path` ({} without one); refuses a checkpoint of other prompts, methods or settings."""
    if not path.exists():
        return {}
    saved = json.loads(path.read_text())
    if saved["key"] != _checkpoint_key(prompts, methods, settings):
        raise SystemExit(f"{path} holds runs of other prompts, methods or settings; remove it or change --output")
    return {key: {name: Run(**run) for name, run in per_method.items()} for key, per_method in saved["runs"].items()}


def save_checkpoint(path: Path, prompts: list[Prompt], methods, settings: dict, done: dict[str, dict[str, Run]]) -> None:
    runs = {key: {name: asdict(run) for name, run in per_method.items()} for key, per_method in done.items()}
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps({"key": _checkpoint_key(prompts, methods, settings), "runs": runs}))
    os.replace(partial, path)  # a kill mid-write leaves the previous checkpoint intact


def timings_of(runs: list[list[dict[str, Run]]]) -> dict[str, dict[str, np.ndarray | None]]:
    """timings[method] = {"new_tokens", "seconds", "forward_seconds", "cpu_seconds"}: [prompts, repeats]
    arrays (forward_seconds None for HF)."""
    methods = runs[0][0]

    def array(name, value) -> np.ndarray:
        return np.array([[value(per_repeat[i][name]) for per_repeat in runs] for i in range(len(runs[0]))])

    return {
        name: {
            "new_tokens": array(name, lambda run: len(run.tokens)),
            "seconds": array(name, lambda run: run.seconds),
            "cpu_seconds": array(name, lambda run: run.cpu_seconds),
            "forward_seconds": None if methods[name].forward_seconds is None else array(name, lambda run: run.forward_seconds),
        }
        for name in methods
    }


def pooled_ratio(a_num, a_den, b_num, b_den, draws: np.ndarray) -> Interval:
    """(sum a_num / sum a_den) / (sum b_num / sum b_den) over prompts ([prompts, repeats] arrays), with
    the 95% percentile interval of the same statistic over `draws` ([draws, prompts] prompt indices)."""
    a_num, a_den, b_num, b_den = (x.sum(1) for x in (a_num, a_den, b_num, b_den))  # pool the repeats

    def ratio(idx):
        return (a_num[idx].sum(-1) / a_den[idx].sum(-1)) / (b_num[idx].sum(-1) / b_den[idx].sum(-1))

    low, high = np.percentile(ratio(draws), [2.5, 97.5])
    return Interval(float(ratio(np.arange(len(a_num)))), float(low), float(high))


def per_repeat_range(a_num, a_den, b_num, b_den) -> list[float]:
    """[min, max] over repeats of the same ratio computed on one repeat's prompts."""
    per = (a_num.sum(0) / a_den.sum(0)) / (b_num.sum(0) / b_den.sum(0))
    return [float(per.min()), float(per.max())]


def summarize(timings, first, prompts: list[Prompt], skip_count: int, seed: int) -> tuple[list[dict], dict]:
    """Per-method rows and the ratios {name: {"point", "low", "high", "repeat_range", "cpu"}}: tokens/s
    over wall seconds, and ("cpu", the same keys) over CPU seconds (not for the overhead ratio)."""
    rows = []
    for name, t in timings.items():
        accepts = [a for run in first[name] if run.accept_lengths is not None for a in run.accept_lengths]
        reference = reference_of(name)
        identical = None
        if reference in first and reference != name:
            identical = sum(run.tokens == ref.tokens for run, ref in zip(first[name], first[reference], strict=True))
        rows.append({
            "method": name,
            "tokens_per_s": float(t["new_tokens"].sum() / t["seconds"].sum()),
            "accept_length": sum(accepts) / len(accepts) if accepts else None,
            "target_forwards": len(accepts) if accepts else None,
            "new_tokens": sum(len(run.tokens) for run in first[name]),
            "reference": reference if identical is not None else None,
            "identical_prompts": identical,
        })
    draws = np.random.default_rng(seed).integers(0, len(prompts), (DRAWS, len(prompts)))

    def interval(*arrays) -> dict:
        point, low, high = pooled_ratio(*arrays, draws).as_list()
        return {"point": point, "low": low, "high": high, "repeat_range": per_repeat_range(*arrays)}

    ratios = {}
    for num, den in RATIOS:
        num = num.format(n=skip_count)
        if num in timings and den in timings:
            a, b = timings[num], timings[den]
            ratios[f"{num} / {den}"] = interval(a["new_tokens"], a["seconds"], b["new_tokens"], b["seconds"]) | {
                "cpu": interval(a["new_tokens"], a["cpu_seconds"], b["new_tokens"], b["cpu_seconds"])}
    dense = timings.get("ours_dense")
    if dense is not None:  # forwards-only tokens/s over wall tokens/s = wall / forwards
        ratios[OVERHEAD] = interval(dense["new_tokens"], dense["forward_seconds"], dense["new_tokens"], dense["seconds"])
    return rows, ratios


def divergences(eager, prompts: list[Prompt], first: dict[str, list[Run]], method: str = "ours_dense") -> list[dict]:
    """Where `method`'s greedy output first differs from HF greedy's, per prompt that differs: the
    position, both tokens, and the margin between the eager model's two best logits there (a near-tie
    when small: float rounding of another kernel can flip it, and both outputs are then greedy)."""
    found = []
    for prompt, ours, hf in zip(prompts, first.get(method, []), first.get("hf_greedy", [])):
        if ours.tokens == hf.tokens:
            continue
        position = next((i for i, (a, b) in enumerate(zip(ours.tokens, hf.tokens)) if a != b),
                        min(len(ours.tokens), len(hf.tokens)))
        with torch.inference_mode():
            ids = torch.tensor([[*prompt.ids, *hf.tokens[:position]]])
            logits = eager.model(input_ids=ids).logits[0, -1].float()
        top = logits.topk(2).values
        found.append({"prompt": prompt.id, "position": position, "ours": ours.tokens[position:position + 1],
                      "hf": hf.tokens[position:position + 1], "eager_top2_margin": float(top[0] - top[1])})
    return found


def markdown(header: str, prompts: list[Prompt], rows: list[dict], ratios: dict, repeats: int) -> str:
    n = len(prompts)
    lines = [header, "", "Prompts (ids by category):", ""]
    by_category: dict[str, list[str]] = {}
    for p in prompts:
        by_category.setdefault(p.category, []).append(str(p.question_id if p.question_id is not None else p.id))
    lines += [f"- {category}: {', '.join(ids)}" for category, ids in by_category.items()]
    lines += ["", "| method | tokens/s | accept length | target forwards | new tokens | identical to |",
              "|---|---|---|---|---|---|"]
    for row in rows:
        accept = f"{row['accept_length']:.2f}" if row["accept_length"] is not None else "-"
        forwards = row["target_forwards"] if row["target_forwards"] is not None else "-"
        same = f"{row['reference']}: {row['identical_prompts']}/{n}" if row["reference"] else "-"
        lines.append(f"| {row['method']} | {row['tokens_per_s']:.1f} | {accept} | {forwards} | {row['new_tokens']} | {same} |")
    spread = f" range over {repeats} repeats |" if repeats > 1 else ""
    lines += ["", f"| ratio (tokens/s) | pooled | 95% CI over {n} prompts (paired bootstrap) |{spread} by CPU time [95% CI] |",
              "|---|---|---|" + "---|" * (2 if spread else 1)]
    for name, r in ratios.items():
        spread = f" {r['repeat_range'][0]:.3f}-{r['repeat_range'][1]:.3f} |" if repeats > 1 else ""
        cpu = f"{r['cpu']['point']:.3f} [{r['cpu']['low']:.3f}-{r['cpu']['high']:.3f}]" if "cpu" in r else "-"
        lines.append(f"| {name} | {r['point']:.3f} | {r['low']:.3f}-{r['high']:.3f} |{spread} {cpu} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help='model source for load_model ("tiny": random test model)')
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--forward-path", default="auto", choices=("auto", "eager", "fast"),
                        help="the path ours run on (HF and ours_dense_eager always run eager)")
    parser.add_argument("--spec-bench", default=None, help="path to Spec-Bench question.jsonl (default: built-in sets)")
    parser.add_argument("--per-category", type=int, default=2, help="Spec-Bench prompts drawn per category")
    parser.add_argument("--categories", default="", help="comma-separated Spec-Bench categories (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-category draw and of the bootstrap")
    parser.add_argument("--per-domain", type=int, default=4, help="built-in sets: prompts per domain")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--k", type=int, default=5, help="draft tokens per step (the cap, for adaptive drafting)")
    parser.add_argument("--verify-cost-per-token", type=float, default=GenerationConfig.verify_cost_per_token,
                        help="the adaptive draft length's cost of one more verified token")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's; on a shared machine 1 avoids stalls of oversubscribed threads)")
    parser.add_argument("--skip", default="8,12,16,20", help="skip set for the sparse target")
    parser.add_argument("--self-skip", default="6-23", help="draft skip set of the self_skip drafter (a-b range)")
    parser.add_argument("--skip-methods", default="", help="comma-separated methods to leave out (e.g. ours_self_skip)")
    parser.add_argument("--llama-lookup", default=None, help="llama.cpp's llama-lookup binary: its lookup and greedy run too")
    parser.add_argument("--gguf", default=None, help="the model's weights as a GGUF, for --llama-lookup")
    parser.add_argument("--output", default="outputs/bench_engine.json")
    parser.add_argument("--resume", action="store_true",
                        help="keep the runs saved in <output stem>.runs.json by an interrupted run and run only the rest")
    args = parser.parse_args(argv)

    load_start = os.getloadavg()
    started = time.time()
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(args.model, dtype=args.dtype, forward_path=args.forward_path)
    eager = loaded if loaded.forward_path == "eager" else load_model(args.model, dtype=args.dtype, forward_path="eager")
    if args.spec_bench:
        categories = [c for c in args.categories.split(",") if c]
        prompts = spec_bench_prompts(loaded.tokenizer, args.spec_bench, args.per_category, args.seed, categories)
        source = f"Spec-Bench ({args.spec_bench}), {args.per_category} per category (seed {args.seed}), first turn"
    else:
        prompts = builtin_prompts(loaded.tokenizer, args.per_domain)
        source = f"built-in sets ({' + '.join(BUILTIN_DOMAINS)}), {args.per_domain} per domain"
    methods = build_methods(loaded, eager, args)
    if args.llama_lookup:
        if not (args.gguf and Path(args.gguf).is_file() and Path(args.llama_lookup).is_file()):
            raise SystemExit("--llama-lookup needs the binary and --gguf, an existing GGUF of the same weights")
        for name, draft in (("llamacpp_greedy", 0), ("llamacpp_lookup", args.k)):
            methods[name] = llama_cpp_lookup(args.llama_lookup, args.gguf, loaded.tokenizer, args.max_new_tokens, draft,
                                             torch.get_num_threads())
    for name in filter(None, args.skip_methods.split(",")):
        if name not in methods:
            raise SystemExit(f"unknown method {name!r} in --skip-methods; methods: {', '.join(methods)}")
        del methods[name]

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = output.with_name(output.stem + ".runs.json")
    settings = {k: getattr(args, k) for k in ("model", "dtype", "max_new_tokens", "k", "verify_cost_per_token", "skip", "self_skip")}
    settings["forward_path"] = loaded.forward_path
    settings["threads"] = torch.get_num_threads()
    runs = run_all(methods, prompts, args.repeats, checkpoint, settings, args.resume)
    timings, first = timings_of(runs), {name: [per_method[name] for per_method in runs[0]] for name in methods}
    skip = parse_layers(args.skip)
    rows, ratios = summarize(timings, first, prompts, len(skip), args.seed)
    load_end = os.getloadavg()
    wall_minutes = (time.time() - started) / 60
    header = (
        f"model {args.model} ({args.dtype}, ours on the {loaded.forward_path} path), {len(prompts)} prompts ({source}), "
        f"max_new_tokens {args.max_new_tokens}, k {args.k}, {args.repeats} repeat(s), "
        f"torch threads {torch.get_num_threads()}, skip set {list(skip)}, self_skip draft skip {args.self_skip}; "
        f"{wall_minutes:.1f} min; load average (1/5/15 min) "
        f"{'/'.join(f'{x:.2f}' for x in load_start)} at start, {'/'.join(f'{x:.2f}' for x in load_end)} at end"
    )
    text = markdown(header, prompts, rows, ratios, args.repeats)
    diverged = divergences(eager, prompts, first)
    if diverged:
        margins = ", ".join(f"{d['eager_top2_margin']:.2g}" for d in diverged)
        text += (f"\n\nours_dense differs from hf_greedy on {len(diverged)} of {len(prompts)} prompts; at each first "
                 f"divergence the eager model's two best logits were {margins} apart (near-ties: either token is greedy "
                 "within float rounding).")
    print(text)
    result = {
        "header": header,
        "args": vars(args),
        "load_average": {"start": list(load_start), "end": list(load_end)},
        "wall_minutes": wall_minutes,
        "prompts": [{k: v for k, v in asdict(p).items() if k != "ids"} | {"prompt_tokens": len(p.ids)} for p in prompts],
        "rows": rows,
        "ratios": ratios,
        "divergences": diverged,
        # Per method: [prompt][repeat] new tokens, wall seconds, seconds in model forwards (None for HF), CPU seconds.
        "timings": {name: {key: None if value is None else value.tolist() for key, value in t.items()}
                    for name, t in timings.items()},
        # Per method, per prompt: whether its (repeat 0) output equals its reference method's.
        "identical": {row["method"]: [run.tokens == ref.tokens for run, ref in zip(first[row["method"]], first[row["reference"]])]
                      for row in rows if row["reference"]},
    }
    output.write_text(json.dumps(result, indent=2))
    output.with_suffix(".md").write_text(text + "\n")
    checkpoint.unlink()


if __name__ == "__main__":
    main()
