"""EAGLE drafters, one room: the drafter (drafter.py) over a one-layer head (head.py), its checkpoints
(checkpoint.py), and its training by self-distillation: what decides a head (recipe.py), the data it
trains on (data.py) and the loop (training.py)."""

from specsparse.drafters.eagle.drafter import EagleDrafter

__all__ = ["EagleDrafter"]
