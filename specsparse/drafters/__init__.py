"""Drafters propose chains (or trees) of tokens for the target to verify. The engine drives each through
`Drafter` (specsparse/decoding/drafter.py); a job builds, checks, prices and records each through
`ConfiguredDrafter` (base.py), which every drafter here derives from."""

from specsparse.decoding.drafter import Drafter, Proposal
from specsparse.drafters.base import ConfiguredDrafter, PlannedJob
from specsparse.drafters.draft_model import DraftModelDrafter
from specsparse.drafters.eagle import EagleDrafter
from specsparse.drafters.pld import PromptLookupDrafter
from specsparse.drafters.recycling import TokenRecyclingDrafter
from specsparse.drafters.samd import SuffixAutomatonDrafter
from specsparse.drafters.self_skip import SelfSkipDrafter

# Short drafter names to class dotpaths, for where a name stands for a drafter config: `specsparse
# serve --drafter NAME`, and config maps written before maps recorded their drafter's config.
DRAFTERS: dict[str, str] = {
    cls.name: f"{cls.__module__}.{cls.__qualname__}"
    for cls in (PromptLookupDrafter, SuffixAutomatonDrafter, TokenRecyclingDrafter, SelfSkipDrafter, DraftModelDrafter,
                EagleDrafter)
}

__all__ = [
    "DRAFTERS",
    "ConfiguredDrafter",
    "DraftModelDrafter",
    "Drafter",
    "EagleDrafter",
    "PlannedJob",
    "PromptLookupDrafter",
    "Proposal",
    "SelfSkipDrafter",
    "SuffixAutomatonDrafter",
    "TokenRecyclingDrafter",
]
