"""The TSS rule: the settings every target-layer skip search shares, as one object.

run.py's configuration holds them in its `tss` group, and each layer-skip search option receives the
group whole (`rule: ${tss}` in conf/search/*.yaml), so a preset that changes one setting changes it
for every search. The defaults below are the ones run.py runs; conf/config.yaml restates them only so
they can be overridden on the command line (tests/jobs/test_presets.py checks that the two agree).
"""

from __future__ import annotations

from dataclasses import dataclass

from specsparse.search.pareto import SELECTION_RULES

FEASIBILITY_RULES = ("point", "lower_bound")
GUARDS = ("auto", "task", "fidelity", "both")


@dataclass(frozen=True)
class TSSRule:
    """How deep a layer-skip search explores, which configurations it accepts, and how it picks one.

    max_depth: most layers a skip set skips (greedy, GM-Skip, is not bound to it: its own
        max_deletions caps it).
    max_pool: BFS pool cap (None: every layer passing the OR rule, as in the paper; a cap is a deviation
        that keeps deeper levels affordable on small machines).
    tau: BFS pool tolerance: a layer enters if its single skip keeps A or M within tau (None: eps_accept
        for A and eps_metric for M).
    eps_accept, eps_metric: the tolerances of feasibility, A >= (1 - eps_accept) A0 and
        M >= (1 - eps_metric) M0.
    protect_layers: layers never skipped (e.g. the first and the last).
    early_reject: expose `feasibility_thresholds()` to runners that can stop measurements early.
    feasibility: "lower_bound" (a deviation from the papers): the lower ends of the paired-bootstrap 95%
        intervals of A/A0 and M/M0 over the calibration prompts must reach 1 - eps (see
        `specsparse.measuring.intervals`); "point": the papers' rule on point estimates
        (experiments/tss_main/README.md compares the two on the test split).
    metric_floor: a metric whose dense 95% interval reaches below it stops constraining: the rule then
        uses accept length alone (a deviation from the papers, which always constrain; 0 keeps their
        rule). Either way, a dense metric whose interval reaches below
        `specsparse.search.base.UNINFORMATIVE_BELOW` gets a "metric uninformative" note in the
        selection, so a constraint that rests on noise is never silent. Dropping it is risky: a skip set
        that degrades the output into repetitions raises accept length (experiments/tss_main/README.md).
    guard: the quality check besides accept length. "task": the task metric (the papers). "fidelity"
        (an extension): the replies' chrF against the dense target's own replies
        (`specsparse.measuring.fidelity`) must reach `min_fidelity` (0-100; under "lower_bound" the
        lower end of its 95% interval). "both": both. "auto": the task metric, plus fidelity where the
        domain has no metric or an uninformative one, so no domain is guarded by accept length alone.
        The single-objective baselines take it as they take the metric: only `accept_only` leaves it out.
    select: how the pick is made among feasible configurations. "time_per_token" (a deviation): the
        Pareto front over (A, M, modeled time per generated token), cheapest first, which accounts for
        accept length. "verify_cost": drop what (A, M) dominate, then take the lowest modeled verification
        cost per step. Both come from the cost profile, never from a stored timing. "measured" (the paper's
        rule as it states it): the front of "verify_cost", cheapest modeled first; the job then times its
        first `measured_candidates` and dense with the engine, side by side on `measured_prompts`
        calibration prompts, and keeps the lowest measured time per token (the test split stays
        untouched until the held-out check).
    measured_candidates, measured_prompts: how many front members, and calibration prompts (None: all),
        select="measured" times.
    """

    max_depth: int = 4
    max_pool: int | None = None
    tau: float | None = 0.05
    eps_accept: float = 0.05
    eps_metric: float = 0.05
    protect_layers: tuple[int, ...] = ()
    early_reject: bool = False
    feasibility: str = "lower_bound"
    metric_floor: float = 0.0
    guard: str = "auto"
    min_fidelity: float = 30.0
    select: str = "time_per_token"
    measured_candidates: int = 4
    measured_prompts: int | None = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "protect_layers", tuple(sorted({int(i) for i in self.protect_layers})))
        if self.guard not in GUARDS:
            raise ValueError(f"guard must be one of {GUARDS}, got {self.guard!r}")
        if not 0 <= self.min_fidelity <= 100:
            raise ValueError(f"min_fidelity must be in [0, 100] (chrF), got {self.min_fidelity}")
        if self.select not in SELECTION_RULES:
            raise ValueError(f"select must be one of {SELECTION_RULES}, got {self.select!r}")
        if self.feasibility not in FEASIBILITY_RULES:
            raise ValueError(f"feasibility must be one of {FEASIBILITY_RULES}, got {self.feasibility!r}")
        if not 0 <= self.metric_floor < 1:
            raise ValueError(f"metric_floor must be in [0, 1), got {self.metric_floor}")
        if self.max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {self.max_depth}")
        if self.measured_candidates < 1 or self.measured_prompts is not None and self.measured_prompts < 2:
            raise ValueError(f"measured_candidates must be >= 1 and measured_prompts >= 2 or None, got "
                             f"{self.measured_candidates}, {self.measured_prompts}")
        if not 0 <= self.eps_accept < 1 or not 0 <= self.eps_metric < 1:
            raise ValueError(f"eps_accept and eps_metric must be in [0, 1), got {self.eps_accept}, {self.eps_metric}")
        if self.max_pool is not None and self.max_pool < 1:
            raise ValueError(f"max_pool must be >= 1 or None, got {self.max_pool}")
        if self.tau is not None and not 0 <= self.tau < 1:
            raise ValueError(f"tau must be in [0, 1) or None, got {self.tau}")
        object.__setattr__(self, "min_fidelity", float(self.min_fidelity))

    def check(self, num_layers: int, model: str = "the model") -> None:
        """ValueError (one line) for settings a `num_layers`-deep model (named `model` in the message)
        cannot meet: protected layers that leave nothing to skip, a depth beyond the model's."""
        if len(self.protect_layers) >= num_layers:
            raise ValueError(f"tss.protect_layers protects all {num_layers} layers of {model}, so the search has "
                             "nothing to skip: leave at least one layer unprotected")
        if self.max_depth > num_layers:
            raise ValueError(f"tss.max_depth={self.max_depth}: {model} has {num_layers} layers, so a skip set holds at "
                             f"most {num_layers}: give tss.max_depth <= {num_layers}")
