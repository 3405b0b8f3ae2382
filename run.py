"""Hydra entry point of a checkout: compose conf/, validate, run one job (one per combination with -m).
An installed specsparse runs the same with `specsparse run ...` (specsparse/cli/run.py: what a job writes).

    python run.py                                          # quickstart on SmolLM2-135M (a few minutes)
    python run.py -m domain=translation,summarization search=bfs,greedy
    python run.py -m experiment=tss_main runner=ray runner.num_workers=4
    python run.py --cfg job                                # print the composed config
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from specsparse.cli.run import run_from_config


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | tuple[float, ...] | None:
    return run_from_config(cfg)


if __name__ == "__main__":
    main()
