"""specsparse's Ray launcher for Hydra (`hydra/launcher=specsparse_ray`; conf/hydra/launcher/ray.yaml
names it `hydra/launcher=ray` in this project). Hydra finds it in the `hydra_plugins` namespace package."""
