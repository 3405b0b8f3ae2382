"""What several search test modules share: the Hypothesis budget of their property tests, and a synthetic
objective on which each objective alone prefers another skip set (the helpers every test room shares, such
as `additive`, `TRAP` and `search_on`, are in tests/conftest.py)."""

from __future__ import annotations

from conftest import additive
from hypothesis import settings

FAST = settings(max_examples=25, deadline=None)


# Each objective alone prefers another set: layers 3 and 5 raise accept length (5 ruins the metric),
# layers 2 and 6 raise the metric; everything else costs A 0.2 and M 0.05.
TWO_WAYS = additive(10, {3: -0.1, 5: -0.4}, {2: -0.1, 5: 0.5, 6: -0.05}, {}, default=(0.2, 0.05, 0.1))
