"""Drafters propose chains of tokens for the target to verify. All share `Drafter` (see base.py)."""

from specsparse.drafters.base import Drafter, Proposal
from specsparse.drafters.draft_model import DraftModelDrafter
from specsparse.drafters.pld import PromptLookupDrafter
from specsparse.drafters.recycling import TokenRecyclingDrafter
from specsparse.drafters.samd import SuffixAutomatonDrafter
from specsparse.drafters.self_skip import SelfSkipDrafter

__all__ = [
    "DraftModelDrafter",
    "Drafter",
    "PromptLookupDrafter",
    "Proposal",
    "SelfSkipDrafter",
    "SuffixAutomatonDrafter",
    "TokenRecyclingDrafter",
]
