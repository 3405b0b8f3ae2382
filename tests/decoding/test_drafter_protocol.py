"""The engine's drafter protocol stays narrow: what building, checking, pricing or recording a
drafter needs lives on `specsparse.drafters.base.ConfiguredDrafter`, never on the engine's base."""

from __future__ import annotations

import ast
from pathlib import Path

import specsparse.decoding
from specsparse.decoding import drafter as engine_drafter
from specsparse.decoding.drafter import Drafter

ENGINE_PROTOCOL = {
    "name", "replayable", "drafts_trees", "feature_layers",
    "begin", "propose", "observe", "observe_features", "reset", "close", "replay_drafters",
}


def test_the_engine_base_holds_the_engine_protocol_only():
    assert {member for member in vars(Drafter) if not member.startswith("_")} == ENGINE_PROTOCOL


def test_the_engine_module_holds_no_job_concerns():
    public = {name for name in vars(engine_drafter) if not name.startswith("_")}
    assert "PlannedJob" not in public and "ConfiguredDrafter" not in public


def test_the_engine_package_asks_drafters_for_the_protocol_only():
    """No decoding module reads a job-facing member of a drafter (attribute names as written)."""
    job_facing = {"from_target", "check_options", "check_job", "drafts_trees_with", "knows_training_replies",
                  "trains_at_k", "recorded_options", "job_context", "trims_vocabulary", "head_shape", "cost_key",
                  "head_calls"}
    root = Path(specsparse.decoding.__file__).parent
    used = {f"{path.relative_to(root)}: {node.attr}" for path in root.rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and node.attr in job_facing}
    assert used == set()
