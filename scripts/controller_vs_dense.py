"""A mixed stream of held-out prompts from several domains through the runtime controller (router
picks each domain's skip set) vs the dense target with the same drafter, measured in one run.

    python scripts/controller_vs_dense.py --config-map outputs/evidence/config_map.yaml

Per domain: requests, routing accuracy, accept length, task metric and tokens/s for both paths.
The two paths alternate request by request, so machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from specsparse.data import build_messages, get_domain, load_examples, split_examples
from specsparse.decoding.generation import generate_text
from specsparse.serving.controller import Controller
from specsparse.types import GenerationConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-map", required=True)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--drafter", default="samd")
    parser.add_argument("--per-domain", type=int, default=6, help="held-out test prompts per domain")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()

    controller = Controller.from_files(model=args.model, config_map=args.config_map, drafter=args.drafter)
    domains = list(controller.config_map.domains)
    stream = []  # round-robin over domains: a mixed stream
    per_domain = {d: split_examples(load_examples(d))[1][: args.per_domain] for d in domains}
    for i in range(args.per_domain):
        stream += [per_domain[d][i] for d in domains if i < len(per_domain[d])]
    config = GenerationConfig(max_new_tokens=args.max_new_tokens)
    dense_drafter = controller.drafter_factory(controller.target, None)  # its own instance: no shared state
    rows = defaultdict(lambda: defaultdict(list))
    for example in stream:
        domain = get_domain(example.domain)
        messages = build_messages(domain, example, 0)
        routed = controller.generate(messages, max_new_tokens=args.max_new_tokens)
        text, dense = generate_text(controller.target, messages, dense_drafter, config)
        row = rows[example.domain]
        row["correct_route"].append(routed.domain == example.domain)
        row["skipping"].append(bool(routed.skip_layers))
        for path, out, stats in (("tss", routed.text, routed.generation), ("dense", text, dense)):
            row[f"{path}_text"].append(out)
            row[f"{path}_accepts"].extend(stats.accept_lengths)
            row[f"{path}_tokens"].append(stats.new_tokens)
            row[f"{path}_seconds"].append(stats.wall_time_s)
        row["examples"].append(example)
    print("| domain | requests | routed right | ran sparse | A dense | A TSS | M dense | M TSS | tok/s dense | tok/s TSS | speedup |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        domain = get_domain(name)

        def stats(path, row=row, domain=domain):
            accepts = row[f"{path}_accepts"]
            metric = domain.score_outputs(row[f"{path}_text"], row["examples"])
            return (sum(accepts) / len(accepts), "n/a" if metric is None else f"{metric['score']:.3f}",
                    sum(row[f"{path}_tokens"]) / sum(row[f"{path}_seconds"]))

        a_d, m_d, t_d = stats("dense")
        a_s, m_s, t_s = stats("tss")
        n = len(row["examples"])
        print(f"| {name} | {n} | {sum(row['correct_route'])}/{n} | {sum(row['skipping'])}/{n} | {a_d:.2f} | {a_s:.2f} "
              f"| {m_d} | {m_s} | {t_d:.1f} | {t_s:.1f} | {t_s / t_d:.2f}x |")


if __name__ == "__main__":
    main()
