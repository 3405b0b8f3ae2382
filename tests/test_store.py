"""Results store: content hashing, round trips, idempotence, crash safety, tables and CSV."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsparse.jobs.store import ResultsStore, measurement_from_dict, measurement_to_dict
from specsparse.types import Candidate, Measurement, PromptResult
from specsparse.util import content_hash

ROOT = Path(__file__).resolve().parents[1]


def measurement(a=2.5, metric=0.4, early_stopped=False, n_prompts=2):
    prompts = tuple(
        PromptResult(f"ex{i}", f"out {i} ü", (1, 3, 2), 6, 0.5, 0.25, None if i else 1.0) for i in range(n_prompts)
    )
    return Measurement(a, metric, 0.012, 0.9, 40.0, 12, 5, 0.3, 0.01, early_stopped, prompts)


def meta(domain="qa", skip=(1, 2)):
    return {"model": "tiny", "domain": domain, "candidate": {"skip_layers": list(skip), "vocab_size": None},
            "generation": {"max_new_tokens": 8, "seed": 0}}


# -- hashing -------------------------------------------------------------------------------------------
def test_content_hash_is_canonical():
    assert content_hash({"a": 1, "b": [1, 2]}) == content_hash({"b": (1, 2), "a": 1})
    assert content_hash({"a": 1}) != content_hash({"a": 1.5})
    assert content_hash(Candidate((2, 1))) == content_hash({"skip_layers": [1, 2], "vocab_size": None})
    assert len(content_hash("x")) == 64
    with pytest.raises(ValueError):
        content_hash({"a": float("nan")})
    with pytest.raises(TypeError):
        content_hash({"a": object()})


json_st = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=50, deadline=None)
@given(json_st)
def test_content_hash_ignores_dict_order(obj):
    def reverse(o):
        if isinstance(o, dict):
            return {k: reverse(o[k]) for k in reversed(list(o))}
        if isinstance(o, list):
            return tuple(reverse(x) for x in o)
        return o

    assert content_hash(obj) == content_hash(reverse(obj))


# -- round trip and idempotence ------------------------------------------------------------------------
def test_measurement_dict_round_trip():
    m = measurement()
    back = measurement_from_dict(measurement_to_dict(m))
    assert back == m and back.per_prompt == m.per_prompt
    assert isinstance(back.per_prompt[0].accept_lengths, tuple)


def test_put_get_round_trip(tmp_path):
    m = measurement()
    with ResultsStore(tmp_path / "r.sqlite") as store:
        assert store.get("k") is None
        assert store.put("k", m, meta())
        got = store.get("k")
        assert got == m and got.per_prompt == m.per_prompt
        assert store.get_meta("k") == meta()
        assert "k" in store and len(store) == 1
    with ResultsStore(tmp_path / "r.sqlite") as reopened:
        assert reopened.get("k").per_prompt == m.per_prompt
        [(stored_meta, stored)] = list(reopened.described())
        assert stored_meta == meta() and stored == m and stored.per_prompt == m.per_prompt


def test_put_is_idempotent(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        assert store.put("k", measurement(a=2.0), meta())
        assert not store.put("k", measurement(a=9.0), meta(domain="other"))
        assert len(store) == 1
        assert store.get("k").accept_length == 2.0
        assert store.get_meta("k")["domain"] == "qa"


def test_early_stopped_round_trip(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        store.put("k", measurement(early_stopped=True), {**meta(), "early_stop_thresholds": [2.3, None]})
        assert store.get("k").early_stopped
        assert store.rows(early_stopped=True)[0]["early_stop_thresholds"] == (2.3, None)


def test_second_handle_reads_while_first_is_open(tmp_path):
    path = tmp_path / "r.sqlite"
    with ResultsStore(path) as writer, ResultsStore(path) as reader:
        writer.put("a", measurement(), meta())
        assert reader.get("a") == measurement()


# -- tables ----------------------------------------------------------------------------------------------
def test_rows_flatten_and_filter(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        store.put("a", measurement(a=2.0), meta("qa", (1,)))
        store.put("b", measurement(a=3.0, metric=None), meta("math", (1, 2)))
        store.put("c", measurement(a=4.0), {"domain": "qa", "modeled_cost": "meta field clashing with a column"})
        rows = store.rows()
        assert [r["key"] for r in rows] == ["a", "b", "c"]
        assert rows[0]["generation.max_new_tokens"] == 8
        assert rows[0]["candidate.skip_layers"] == (1,)
        assert rows[1]["metric"] is None
        assert rows[2]["meta.modeled_cost"].startswith("meta field") and rows[2]["modeled_cost"] == 0.012
        assert [r["key"] for r in store.rows(domain="qa")] == ["a", "c"]
        assert [r["key"] for r in store.rows(**{"candidate.skip_layers": [1, 2]})] == ["b"]
        assert store.rows(domain="none") == []
        df = store.to_dataframe()
    assert list(df.columns[:1]) == ["key"] and df.columns[-1] == "created"
    assert {"accept_length", "modeled_cost", "early_stopped", "domain", "model"} <= set(df.columns)
    assert len(df) == 3 and "per_prompt" not in df.columns


def test_export_csv_is_atomic_and_readable(tmp_path):
    out = tmp_path / "reports" / "all.csv"
    with ResultsStore(tmp_path / "r.sqlite") as store:
        store.export_csv(out)  # empty store: header only
        assert pd.read_csv(out).empty
        store.put("a", measurement(), meta("qa", (1, 2)))
        store.put("b", measurement(), meta("math", ()))
        store.export_csv(out)
    df = pd.read_csv(out)
    assert list(df["key"]) == ["a", "b"]
    assert list(df["candidate.skip_layers"]) == ["[1, 2]", "[]"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["all.csv"]  # no temp file left behind


# -- crash safety ----------------------------------------------------------------------------------------
WRITER = textwrap.dedent(
    """
    import sys
    from specsparse.jobs.store import ResultsStore
    from specsparse.types import Measurement, PromptResult
    store = ResultsStore(sys.argv[1])
    prompts = tuple(PromptResult(f"p{j}", "x" * 2000, (1, 2) * 50, 100, 0.1, 0.1) for j in range(20))
    i = 0
    while True:
        store.put(f"k{i}", Measurement(1.0 + i, 0.5, 0.1, 0.9, 1.0, 1, 1, 0.1, per_prompt=prompts), {"i": i})
        print(i, flush=True)
        i += 1
    """
)


def test_store_survives_process_killed_mid_write(tmp_path):
    path = tmp_path / "r.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        committed = -1
        deadline = time.monotonic() + 60
        while committed < 30 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            committed = int(line)
        assert committed >= 30, "writer did not start"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with ResultsStore(path) as store:
        n = len(store)
        assert n >= committed + 1  # every reported put is durable
        for i in range(n):
            m = store.get(f"k{i}")
            assert m.accept_length == 1.0 + i and len(m.per_prompt) == 20
        assert store.put("after", measurement(), meta())
