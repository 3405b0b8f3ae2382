"""`ConfiguredDrafter`: every drafter a job can name derives from it, and says from its options alone,
before anything loads, whether it drafts trees (what build_plan refuses with temperature > 0)."""

from __future__ import annotations

import pytest

from specsparse.decoding.drafter import Drafter
from specsparse.drafters import (
    DRAFTERS,
    ConfiguredDrafter,
    EagleDrafter,
    PromptLookupDrafter,
    SuffixAutomatonDrafter,
    TokenRecyclingDrafter,
)
from specsparse.util import locate


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_every_named_drafter_is_configured(name):
    cls = locate(DRAFTERS[name])
    assert issubclass(cls, ConfiguredDrafter) and issubclass(cls, Drafter) and cls.name == name


def test_configured_members_are_not_the_engines():
    assert not set(vars(ConfiguredDrafter)) & {m for m in vars(Drafter) if not m.startswith("_")}


@pytest.mark.parametrize(("cls", "options"), [
    (PromptLookupDrafter, {}),
    (PromptLookupDrafter, {"branches": 1}),
    (PromptLookupDrafter, {"branches": 3}),
    (TokenRecyclingDrafter, {"tree": None, "warm_start": False}),
    (TokenRecyclingDrafter, {"tree": [3, 2], "warm_start": False}),
    (TokenRecyclingDrafter, {"tree": "sized", "warm_start": False}),
    (SuffixAutomatonDrafter, {"corpus": [], "recycling_warm_start": False}),
    (SuffixAutomatonDrafter, {"corpus": [], "recycling_warm_start": False, "recycling_tree": [2, 2]}),
    (SuffixAutomatonDrafter, {"corpus": [], "recycling_warm_start": False, "recycling_tree": "sized"}),
])
def test_options_say_what_the_built_drafter_drafts(tiny, cls, options):
    drafter = cls.from_target(tiny, **options, **({"verification_costs": lambda: [1.0] * 8}
                                                  if "verification_costs" in cls.job_context else {}))
    assert cls.drafts_trees_with(options) == drafter.drafts_trees


def test_eagle_trees_come_from_its_tree_options():
    assert not EagleDrafter.drafts_trees_with({"path": "x", "tree": None, "tree_choices": None})
    assert EagleDrafter.drafts_trees_with({"path": "x", "tree": [4, 8]})
    assert EagleDrafter.drafts_trees_with({"path": "x", "tree_choices": [[0], [1]]})


def test_chain_drafters_never_draft_trees():
    assert not ConfiguredDrafter.drafts_trees_with({"tree": [3, 2], "branches": 4})
