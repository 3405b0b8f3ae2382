"""Drafters propose chains of tokens for the target to verify. All share `Drafter` (see base.py)."""

from specsparse.drafters.base import Drafter, Proposal
from specsparse.drafters.pld import PromptLookupDrafter
from specsparse.drafters.recycling import TokenRecyclingDrafter
from specsparse.drafters.samd import SuffixAutomatonDrafter

__all__ = ["Drafter", "PromptLookupDrafter", "Proposal", "SuffixAutomatonDrafter", "TokenRecyclingDrafter"]
