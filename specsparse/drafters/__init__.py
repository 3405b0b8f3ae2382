"""Drafters propose chains (or trees) of tokens for the target to verify. All share `Drafter` (see base.py)."""

from specsparse.decoding.drafter import Drafter, Proposal
from specsparse.drafters.draft_model import DraftModelDrafter
from specsparse.drafters.eagle import EagleDrafter
from specsparse.drafters.pld import PromptLookupDrafter
from specsparse.drafters.recycling import TokenRecyclingDrafter
from specsparse.drafters.samd import SuffixAutomatonDrafter
from specsparse.drafters.self_skip import SelfSkipDrafter

# The drafters by short name (`specsparse generate --drafter NAME`); configs name them by dotpath.
DRAFTERS: dict[str, type[Drafter]] = {
    cls.name: cls
    for cls in (PromptLookupDrafter, SuffixAutomatonDrafter, TokenRecyclingDrafter, SelfSkipDrafter, DraftModelDrafter,
                EagleDrafter)
}

__all__ = [
    "DRAFTERS",
    "DraftModelDrafter",
    "Drafter",
    "EagleDrafter",
    "PromptLookupDrafter",
    "Proposal",
    "SelfSkipDrafter",
    "SuffixAutomatonDrafter",
    "TokenRecyclingDrafter",
]
