"""Hydra entry point: compose conf/, validate, run one job (one per combination with -m).

    python run.py                                          # quickstart on SmolLM2-135M (a few minutes)
    python run.py -m domain=translation,summarization search=bfs,greedy
    python run.py -m experiment=tss_main runner=ray runner.num_workers=4
    python run.py --cfg job                                # print the composed config

Each job writes into its Hydra output dir (outputs/runs/... or outputs/multirun/.../<n>_<domain>_<search>):
.hydra/config.yaml, reproduce.json, config_map.{yaml,json}, measurements.csv, summary.json and, with
logger=wandb, wandb/offline-run-*. Every measurement also goes to the shared results store
(paths.store, default outputs/store.sqlite), so a rerun after an interruption resumes where it stopped.
A bad configuration value stops the job before any model loads, with one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_original_cwd
from omegaconf import DictConfig, OmegaConf

CHOICE_GROUPS = ("model", "drafter", "domain", "search", "runner", "logger", "experiment")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from specsparse.decoding.models import ModelLoadError
    from specsparse.jobs.config import ConfigError, build_plan
    from specsparse.jobs.job import run_plan
    from specsparse.jobs.outputs import results_table

    hydra_cfg = HydraConfig.get()
    choices = {g: str(v) for g, v in hydra_cfg.runtime.choices.items() if g in CHOICE_GROUPS and v is not None}
    try:
        config = OmegaConf.to_container(cfg, resolve=True)
        plan = build_plan(
            config,
            output_dir=hydra_cfg.runtime.output_dir,
            cwd=get_original_cwd(),
            overrides=list(hydra_cfg.overrides.task),
            choices=choices,
        )
        job = run_plan(plan)
    except (ConfigError, ModelLoadError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print()
    print(results_table(job))
    print(f"outputs: {plan.output_dir}")
    print(f"results store: {plan.store_path}")
    print(f"tables and plots: specsparse report {plan.output_dir.parent if hydra_cfg.mode.name == 'MULTIRUN' else plan.output_dir}")


if __name__ == "__main__":
    main()
