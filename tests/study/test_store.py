"""Results store: content hashing, round trips, idempotence, crash safety, tables and CSV."""

from __future__ import annotations

import json
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

from specsparse.study.store import ResultsStore, StoreError, measurement_from_dict, measurement_to_dict
from specsparse.types import Candidate, Measurement, PromptResult
from specsparse.util import content_hash, network_filesystem

ROOT = Path(__file__).resolve().parents[2]


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
    from specsparse.study.store import ResultsStore
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


# -- files and rows the store refuses: one StoreError line naming the file and the fix, nothing replaced --
def foreign_database(path):
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.close()
    return path


def under_a_file(path):
    path.write_text("notes\n")
    return path / "store.sqlite"


BAD_PATHS = {  # name: (make the path to open from tmp_path / "store.sqlite", words of the error)
    "empty file": (lambda p: p.touch() or p, "is an empty file, not a results store: delete it"),
    "short text file": (lambda p: p.write_text("notes\n") and p, "is damaged (file is not a database): move it aside"),
    "long text file": (lambda p: p.write_text("notes\n" * 1000) and p, "is damaged (file is not a database)"),
    "SQLite header, no pages": (lambda p: p.write_bytes(b"SQLite format 3\x00" + bytes(200)) and p, "is damaged"),
    "another program's SQLite database": (foreign_database, "is an SQLite database but not a results store"),
    "a folder": (lambda p: p.mkdir() or p, "is a folder: point paths.store at a file"),
    "a path under a file": (under_a_file, "store.sqlite is a file, not a folder: point paths.store at"),
}


def snapshot(folder):
    return {p: p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("case", BAD_PATHS)
def test_a_file_that_is_not_a_results_store_is_refused_and_left_as_it_was(tmp_path, case):
    make, words = BAD_PATHS[case]
    path = make(tmp_path / "store.sqlite")
    before = snapshot(tmp_path)
    with pytest.raises(StoreError) as raised:
        ResultsStore(path)
    message = str(raised.value)
    assert words in message and str(path) in message and "\n" not in message
    assert snapshot(tmp_path) == before  # nothing replaced, nothing created beside it


def test_a_new_store_is_made_only_where_no_file_exists(tmp_path):
    path = tmp_path / "new" / "folder" / "store.sqlite"
    with ResultsStore(path) as store:
        assert len(store) == 0 and store.put("k", measurement(), meta())
    assert sorted(p.name for p in path.parent.iterdir()) == ["store.sqlite"]  # nothing made aside is left
    with ResultsStore(path) as reopened:
        assert len(reopened) == 1


def garble(path, key, column, text):
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE measurements SET {column} = ? WHERE key = ?", (text, key))
    conn.close()


GARBLED = [  # (column, stored text)
    ("measurement", '{"accept_length": 2.5, "metric'),  # cut short
    ("measurement", "[1, 2]"),  # JSON, not an object
    ("measurement", "{}"),  # an object without the fields
    ("measurement", '{"accept_length": 1, "metric": null, "modeled_cost": 0, "flops_fraction": 1, '
                    '"modeled_tokens_per_s": 0, "new_tokens": 1, "target_forwards": 1, "wall_time_s": 0, '
                    '"per_prompt": [7]}'),  # a per-prompt entry that is not an object
    ("meta", "not json"),
    ("meta", '"a string"'),
]
READERS = {
    "get": lambda store, column: store.get("bad") if column == "measurement" else store.get_meta("bad"),
    "rows": lambda store, column: store.rows(),
    "to_dataframe": lambda store, column: store.to_dataframe(),
    "described": lambda store, column: list(store.described()),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(("column", "text"), GARBLED)
def test_a_garbled_row_is_one_line_naming_its_key_and_the_fix(tmp_path, column, text, reader):
    path = tmp_path / "r.sqlite"
    with ResultsStore(path) as store:
        store.put("good", measurement(), meta())
        store.put("bad", measurement(), meta())
    garble(path, "bad", column, text)
    with ResultsStore(path) as store:
        assert store.get("good") == measurement()  # the other rows still serve
        with pytest.raises(StoreError) as raised:
            READERS[reader](store, column)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message
    assert "the row with key bad is garbled" in message and "delete the row" in message and "or the store" in message


def test_sqlite_errors_while_in_use_are_store_errors(tmp_path):
    path = tmp_path / "r.sqlite"
    with ResultsStore(path, timeout_s=0.1) as store:
        store.put("a", measurement(), meta())
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process writing, and not finishing
        try:
            with pytest.raises(StoreError, match=r"r.sqlite: database is locked while writing to it: .*no other program"):
                store.put("b", measurement(), meta())
            assert store.get("a") == measurement()  # reading goes on beside a writer
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert store.put("b", measurement(), meta())


def test_a_garbled_row_met_mid_job_is_one_error_line_from_run_py(tmp_path):
    """The job opens a good store, loads the model and searches; a garbled row it meets on the way ends
    it with exit code 2 and one `error:` line naming the key, no traceback."""
    store = tmp_path / "store.sqlite"
    args = [sys.executable, str(ROOT / "run.py"), "model=tiny", "logger=none", "domain.limit=10",
            "generation.max_new_tokens=6", "tss.max_depth=1", "evaluate_test=false", "progress=false",
            f"paths.store={store}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

    def job(name):
        return subprocess.run([*args, f"hydra.run.dir={tmp_path / name}"], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)

    assert job("first").returncode == 0
    with ResultsStore(store) as s:
        keys = [r["key"] for r in s.rows()]
    assert len(keys) == 5  # dense, then the four single skips of the tiny model
    garble(store, keys[-1], "measurement", "{garbled")  # read in the search's second round
    done = job("second")
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert f"the row with key {keys[-1]} is garbled" in errors[0] and "delete the row" in errors[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert json.loads((tmp_path / "second" / "reproduce.json").read_text())["status"] == "failed"


MOUNTS = """/dev/sda1 / ext4 rw,relatime 0 0
server:/export /shared nfs4 rw,relatime 0 0
/dev/sdb1 /shared/scratch\\040disk xfs rw 0 0
"""


def test_a_store_on_a_network_filesystem_is_found_from_the_mount_table():
    assert network_filesystem("/shared/specsparse/store.sqlite", MOUNTS) == "nfs4"
    assert network_filesystem("/shared/scratch disk/store.sqlite", MOUNTS) is None  # the longest mount point wins
    assert network_filesystem("/sharedother/store.sqlite", MOUNTS) is None
    assert network_filesystem("/home/me/store.sqlite", MOUNTS) is None


def test_a_job_refuses_a_store_on_a_network_filesystem(tmp_path, monkeypatch):
    """SQLite documents its locking as unsafe on network filesystems: the job says so before anything is written."""
    from conftest import plan_for

    import specsparse.jobs.config as config_module

    monkeypatch.setattr(config_module, "network_filesystem", lambda path: "nfs4" if "shared" in str(path) else None)
    with pytest.raises(config_module.ConfigError, match=r"network filesystem \(nfs4\).*paths.store=/local"):
        plan_for(["model=tiny", f"paths.store={tmp_path / 'shared' / 'store.sqlite'}"], tmp_path)
    assert plan_for(["model=tiny", f"paths.store={tmp_path / 'local' / 'store.sqlite'}"], tmp_path)
    assert not (tmp_path / "shared").exists()
