"""Both feasibility rules on one sweep's stored calibration measurements, beside what held on test.

    python scripts/feasibility_rules.py outputs/multirun/<time> [--store outputs/store.sqlite]

For each job of a BFS sweep run with `tss.feasibility=point`, the search is replayed from the store
(no model runs) once per rule, BFS settings taken from the job's config. A candidate the point run
never measured (the lower-bound pool may differ) counts as infeasible and is reported. Then the job's
held-out verdict for the point pick is printed beside the lower-bound pick: a rule whose picks fail
less often on test, without giving up the ones that hold, is the better default.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specsparse.search import BFSSearch, TSSRule
from specsparse.study.driver import FunctionMeasurer, run_search
from specsparse.study.store import ResultsStore
from specsparse.types import Candidate, Measurement


def stored_calibration(store: ResultsStore, domain: str, model: str) -> dict[Candidate, Measurement]:
    found = {}
    for meta, m in store.described():
        if (meta.get("split") == "calibration" and (meta.get("domain") or {}).get("name") == domain
                and meta.get("model") == model):
            c = meta["candidate"]
            found[Candidate(tuple(c["skip_layers"]), c.get("vocab_size"))] = m
    return found


def replay(measured: dict[Candidate, Measurement], num_layers: int, options: dict, rule: str) -> tuple[Candidate, int]:
    missing = 0

    def evaluate(candidates, on_measured=None):
        nonlocal missing
        out = []
        for c in candidates:
            m = measured.get(c)
            if m is None:
                missing += 1
                m = Measurement(0.0, None, 1e9, 1.0, 0.0, 0, 0, 0.0, early_stopped=True)
            out.append(m)
        return out

    search = BFSSearch(num_layers, TSSRule(**options, feasibility=rule, guard="task"))
    return run_search(search, FunctionMeasurer(evaluate), progress=False).selected, missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep")
    parser.add_argument("--store", default=None, help="default: the store the jobs recorded")
    args = parser.parse_args()
    print("| domain | point pick | held on test (point) | lower_bound pick | candidates it lacked |")
    print("|---|---|---|---|---|")
    for job in sorted(Path(args.sweep).glob("*_bfs")):
        if not (job / "summary.json").is_file():
            continue
        summary = json.loads((job / "summary.json").read_text())
        record = json.loads((job / "reproduce.json").read_text())
        tss = record["config"]["tss"]
        options = {"max_depth": tss["max_depth"], "max_pool": tss["max_pool"], "eps_accept": tss["eps_accept"],
                   "eps_metric": tss["eps_metric"]}
        store = ResultsStore(args.store or record["store"])
        config_map = json.loads((job / "config_map.json").read_text())
        measured = stored_calibration(store, summary["domain"], config_map["model"])
        point, _ = replay(measured, config_map["num_layers"], options, "point")
        lower, missing = replay(measured, config_map["num_layers"], options, "lower_bound")
        held = summary["held_out"]
        verdict = held["verdict"] + (f" ({'; '.join(held['reasons'])})" if held["reasons"] else "")
        print(f"| {summary['domain']} | {point.label} | {verdict} | {lower.label} | {missing} |", flush=True)


if __name__ == "__main__":
    main()
