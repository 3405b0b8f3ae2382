"""The Hydra configuration of a job (config.yaml and its groups), packaged so that an installed specsparse
runs jobs (`specsparse run`); a checkout's `conf/` is this folder, for `python run.py`."""
