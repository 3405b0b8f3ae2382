"""specsparse's Optuna sweeper for Hydra (`hydra/sweeper=specsparse_optuna`; conf/hydra/sweeper/optuna.yaml
names it `hydra/sweeper=optuna` in this project). Hydra finds it in the `hydra_plugins` namespace package."""
