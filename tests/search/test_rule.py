"""`TSSRule.check`: the rule's settings against the model's depth, one line each."""

from __future__ import annotations

import pytest

from specsparse.search.rule import TSSRule


def test_a_rule_that_fits_the_model_passes():
    TSSRule(max_depth=4, protect_layers=(0, 3)).check(4, "tiny")


def test_protecting_every_layer_leaves_nothing_to_skip():
    with pytest.raises(ValueError, match=r"^tss.protect_layers protects all 4 layers of tiny, so the search has "
                                         r"nothing to skip: leave at least one layer unprotected$"):
        TSSRule(protect_layers=(0, 1, 2, 3)).check(4, "tiny")


def test_a_depth_beyond_the_model_is_refused():
    with pytest.raises(ValueError, match=r"^tss.max_depth=5: tiny has 4 layers, so a skip set holds at most 4: "
                                         r"give tss.max_depth <= 4$"):
        TSSRule(max_depth=5).check(4, "tiny")
