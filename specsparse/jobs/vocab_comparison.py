"""The vocabulary paper's comparison as a job writes it: its rows as a markdown table (the comparison
itself runs where the model is: `specsparse.study.vocab_comparison`)."""

from __future__ import annotations

from typing import Any

COLUMNS = ("label", "k", "coverage_corpus", "coverage_generations", "modeled_latency_reduction", "accept_length",
           "draft_ms_per_step", "measured_tokens_per_s", "measured_latency_s", "measured_speedup_vs_full",
           "measured_speedup_vs_plain", "measured_speedup_vs_pruned", "same_as_plain")


def comparison_markdown(comparison: dict[str, Any]) -> str:
    """The rows as a markdown table, intervals as "point [low-high]"."""
    def cell(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, list):
            return f"{value[0]:.3f} [{value[1]:.3f}-{value[2]:.3f}]"
        if isinstance(value, float):
            return f"{value:.3f}"
        return str(value)

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in comparison["rows"]:
        values = {**row, "same_as_plain": f"{row['same_as_plain']}/{comparison['prompts']}"}
        lines.append("| " + " | ".join(cell(values[c]) for c in COLUMNS) + " |")
    stability = comparison.get("stability")
    if stability:
        lines += ["", f"TPE's k on {stability['subsamples']} random {stability['fraction']:.0%} subsets of the corpus: "
                      f"mean {stability['k_mean']:.0f} [{stability['k_min']}-{stability['k_max']}], kept ids' "
                      f"Jaccard overlap with the full corpus's {stability['jaccard_mean']:.3f} "
                      f"(min {stability['jaccard_min']:.3f})."]
    if comparison.get("k_by_corpus_size"):
        lines += ["", "TPE's k against the corpus's size (the paper's ablation; each over "
                      f"{comparison['k_by_corpus_size'][0]['subsamples']} random subsets):", "",
                  "| share of the corpus | texts | k mean [min-max] | Jaccard with the full corpus's ids |", "|---|---|---|---|"]
        lines += [f"| {size['fraction']:.0%} | {size['texts']} | {size['k_mean']:.0f} [{size['k_min']}-{size['k_max']}] | "
                  f"{size['jaccard_mean']:.3f} (min {size['jaccard_min']:.3f}) |" for size in comparison["k_by_corpus_size"]]
    return "\n".join(lines) + "\n"
