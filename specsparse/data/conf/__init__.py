"""Hydra configs packaged with the data: the `domain` group, one file per domain (conf/config.yaml puts this package on hydra.searchpath)."""
