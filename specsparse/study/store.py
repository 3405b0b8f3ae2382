"""Append-only results store: every Measurement ever taken, keyed by a content hash.

The store is the source of truth for sweeps: a measurement is a pure function of everything that
affects it (model, drafter, domain split, candidate, generation settings, seed, ...), so its key is
`content_hash` of that description, and the description itself is kept next to it as `meta`.

Storage is one SQLite file in WAL mode. Each `put` is one transaction, so a process killed mid-sweep
loses at most the measurement in flight and the file stays readable. Rows are never updated or
deleted; putting an existing key is a no-op.

A new store is made only where no file exists (made aside, then linked into place, so a file at the
path is always a whole store). An existing file must be a results store: an empty file, another
program's file or database, a damaged file, a garbled row and every SQLite or I/O error are a
`StoreError`, one line naming the file and the fix.

Early-stopped measurements (`Measurement.early_stopped`) are stored too: they are valid evidence that a
configuration is infeasible, but only for the thresholds that stopped them. The caller puts those
thresholds into the key description, so they are only served back under the same thresholds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specsparse.old_formats import current_store_measurement, current_store_meta
from specsparse.types import Measurement, PromptResult
from specsparse.util import atomic_write_text, canonical_json, first_line

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    meta TEXT NOT NULL,
    measurement TEXT NOT NULL,
    created REAL NOT NULL
)
"""
_COLUMNS = {"seq", "key", "meta", "measurement", "created"}
_ELSEWHERE = "or point paths.store at another file"

# Measurement fields that become dataframe columns (everything except per_prompt and chunk_counts).
SCALAR_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Measurement) if f.name not in ("per_prompt", "chunk_counts")
)


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    """Plain JSON-ready dict of a Measurement, per_prompt included."""
    return dataclasses.asdict(m)


def measurement_from_dict(d: Mapping[str, Any]) -> Measurement:
    """Inverse of `measurement_to_dict`; unknown keys (from newer versions) are ignored. Rows of earlier
    versions are read through `specsparse.old_formats` first (`ResultsStore` does)."""
    names = {f.name for f in dataclasses.fields(Measurement)}
    prompt_names = {f.name for f in dataclasses.fields(PromptResult)}
    kwargs = {k: v for k, v in d.items() if k in names and k != "per_prompt"}
    if "chunk_counts" in kwargs:
        kwargs["chunk_counts"] = tuple(kwargs["chunk_counts"])
    per_prompt = tuple(
        PromptResult(**{**{k: v for k, v in p.items() if k in prompt_names},
                        "accept_lengths": tuple(p.get("accept_lengths", ()))})
        for p in d.get("per_prompt", ())
    )
    return Measurement(**kwargs, per_prompt=per_prompt)


def flatten(meta: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}, "c": [1, 2]} -> {"a.b": 1, "c": (1, 2)} (lists become tuples so rows can be
    compared and hashed)."""
    out: dict[str, Any] = {}
    for k, v in meta.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, name + "."))
        elif isinstance(v, list | tuple):
            out[name] = _freeze(v)
        else:
            out[name] = v
    return out


def _freeze(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, Mapping):
        return json.dumps(v, sort_keys=True)
    return v



class StoreError(RuntimeError):
    """The store cannot be used (not a results store, damaged, a garbled row, an SQLite or I/O error);
    the message is one line naming the file and the fix."""


class ResultsStore:
    """Append-only SQLite store of Measurements.

    >>> store = ResultsStore("outputs/results.sqlite")          # doctest: +SKIP
    >>> key = content_hash(description)                           # doctest: +SKIP
    >>> store.get(key) or store.put(key, evaluate(...), description)  # doctest: +SKIP

    One connection, guarded by a lock, is the single writer of this process. `timeout_s`: how long a
    write waits for another process's write to end before it fails.
    """

    def __init__(self, path: str | os.PathLike, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        if self.path.is_dir():
            raise StoreError(f"results store {self.path} is a folder: point paths.store at a file, "
                             f"e.g. {self.path / 'store.sqlite'}")
        with self._errors("opening it"):
            if not self.path.exists():
                self._create()
            self._conn = self._open()

    def _create(self) -> None:
        """An empty store at `path`, made aside and linked into place: whatever kills this process, a
        file at `path` is a whole store, and one that another process made meanwhile is kept."""
        above = next(p for p in self.path.parents if p.exists())
        if not above.is_dir():
            raise StoreError(f"results store {self.path}: {above} is a file, not a folder: point paths.store at "
                             "a file in a folder")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        aside = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.new")
        try:
            conn = sqlite3.connect(aside, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(_SCHEMA)
            finally:
                conn.close()
            try:
                os.link(aside, self.path)  # unlike a rename, never replaces a file
            except FileExistsError:
                pass
            except OSError:  # a file system without hard links (exFAT): rename, unless a store appeared meanwhile
                if not self.path.exists():
                    os.rename(aside, self.path)
        finally:
            aside.unlink(missing_ok=True)

    def _open(self) -> sqlite3.Connection:
        """A connection to the existing file at `path`, once it is known to be an undamaged results store."""
        if self.path.stat().st_size == 0:
            raise StoreError(f"results store {self.path} is an empty file, not a results store: delete it "
                             f"(a new store is made in its place) {_ELSEWHERE}")
        # mode=rw: SQLite opens what is there and never makes a new file.
        conn = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=rw", uri=True, isolation_level=None,
                               check_same_thread=False, timeout=self.timeout_s)
        try:
            # quick_check reads every page once, cheap even for a large store (BENCHMARKS.md, "Results
            # store"): damage shows now, not in the middle of a sweep.
            problem = conn.execute("PRAGMA quick_check").fetchone()[0]
            if problem != "ok":
                raise sqlite3.DatabaseError(problem)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(measurements)")}
            if not _COLUMNS <= columns:
                raise StoreError(f"results store {self.path} is an SQLite database but not a results store "
                                 f"(no measurements table): give paths.store a file of its own")
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL is crash-safe for process death in WAL mode (only power loss can drop the last commits).
            conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """SQLite and I/O errors as one StoreError line naming the file and the fix."""
        try:
            yield
        except sqlite3.OperationalError as err:  # locked, disk full, read-only, I/O error
            raise StoreError(f"results store {self.path}: {first_line(err)} while {doing}: free disk space, check "
                             f"the file's permissions and that no other program holds it, {_ELSEWHERE}") from None
        except sqlite3.DatabaseError as err:  # not a database, malformed
            raise StoreError(f"results store {self.path} is damaged ({first_line(err)}): move it aside and rerun "
                             f"(measurements are remeasured), {_ELSEWHERE}") from None
        except OSError as err:
            raise StoreError(f"results store {self.path}: {err.strerror or first_line(err)} ({err.filename}) while "
                             f"{doing}: point paths.store at a file in a folder you can write") from None

    def _decoded(self, key: str, text: str, measurement: bool = False) -> Any:
        """A row's JSON column (its meta dict, or its Measurement), a row of an earlier version in this
        version's form (`specsparse.old_formats`); a garbled one is a StoreError."""
        try:
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError(f"JSON {type(value).__name__}, not an object")
            if measurement:
                return measurement_from_dict(current_store_measurement(value))
            return current_store_meta(value)
        except (ValueError, TypeError, AttributeError, KeyError) as err:
            raise StoreError(
                f"results store {self.path}: the row with key {key} is garbled ({first_line(err)}): delete the row "
                f"(sqlite3 {self.path} \"DELETE FROM measurements WHERE key = '{key}'\"; it is measured again) "
                "or the store"
            ) from None

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock, self._errors("reading it"):
            return self._conn.execute(sql, params).fetchall()

    # -- single measurements -------------------------------------------------------------------
    def get(self, key: str) -> Measurement | None:
        """The Measurement stored under `key`, or None."""
        rows = self._query("SELECT measurement FROM measurements WHERE key = ?", (key,))
        return self._decoded(key, rows[0][0], measurement=True) if rows else None

    def get_meta(self, key: str) -> dict[str, Any] | None:
        """The description stored with `key`, or None."""
        rows = self._query("SELECT meta FROM measurements WHERE key = ?", (key,))
        return self._decoded(key, rows[0][0]) if rows else None

    def put(self, key: str, measurement: Measurement, meta: Mapping[str, Any]) -> bool:
        """Store `measurement` under `key` with its description `meta`, in one transaction.

        Returns True if it was written, False if `key` already existed (nothing is changed then).
        """
        meta_text = canonical_json(dict(meta))
        m_text = json.dumps(measurement_to_dict(measurement))
        with self._lock, self._errors("writing to it"):
            # One statement outside BEGIN ... COMMIT: SQLite runs it as one transaction.
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO measurements (key, meta, measurement, created) VALUES (?, ?, ?, ?)",
                (key, meta_text, m_text, time.time()),
            )
        written = cur.rowcount == 1
        if not written:
            log.debug("store: key %s already present, put ignored", key[:12])
        return written

    def __contains__(self, key: object) -> bool:
        return bool(self._query("SELECT 1 FROM measurements WHERE key = ?", (key,)))

    def __len__(self) -> int:
        return self._query("SELECT COUNT(*) FROM measurements")[0][0]

    # -- tables --------------------------------------------------------------------------------
    def _iter_raw(self) -> list[tuple[str, str, str, float]]:
        return self._query("SELECT key, meta, measurement, created FROM measurements ORDER BY seq")

    def described(self) -> Iterator[tuple[dict[str, Any], Measurement]]:
        """(meta, Measurement with its per-prompt results) of every stored measurement, in insertion order."""
        for key, meta_text, m_text, _ in self._iter_raw():
            yield self._decoded(key, meta_text), self._decoded(key, m_text, measurement=True)

    def rows(self, **filters: Any) -> list[dict[str, Any]]:
        """One dict per measurement in insertion order: `key`, the flattened meta fields ("a.b" for
        nested keys, lists as tuples), the scalar Measurement fields and `created` (unix time).

        A meta field that collides with a measurement field is renamed "meta.<name>".
        `filters` keep rows whose column equals the given value (lists compare as tuples), e.g.
        `store.rows(domain="qa", early_stopped=False)`.
        """
        wanted = {k: _freeze(v) for k, v in filters.items()}
        reserved = {"key", "created", *SCALAR_FIELDS}
        out = []
        for key, meta_text, m_text, created in self._iter_raw():
            row: dict[str, Any] = {"key": key}
            for name, value in flatten(self._decoded(key, meta_text)).items():
                row[f"meta.{name}" if name in reserved else name] = value
            m = self._decoded(key, m_text, measurement=True)
            row.update({name: getattr(m, name) for name in SCALAR_FIELDS})
            row["created"] = created
            if all(k in row and row[k] == v for k, v in wanted.items()):
                out.append(row)
        return out

    def to_dataframe(self, **filters: Any):
        """`rows(**filters)` as a pandas DataFrame (columns: key, meta fields, measurement fields,
        created)."""
        import pandas as pd  # noqa: PLC0415

        rows = self.rows(**filters)
        if not rows:
            return pd.DataFrame(columns=["key", *SCALAR_FIELDS, "created"])
        columns: dict[str, None] = {}
        for row in rows:
            columns.update(dict.fromkeys(row))
        front = ["key"]
        back = [*SCALAR_FIELDS, "created"]
        middle = [c for c in columns if c not in front and c not in back]
        return pd.DataFrame(rows, columns=front + middle + back)

    def export_csv(self, path: str | os.PathLike, **filters: Any) -> Path:
        """Write `to_dataframe(**filters)` as CSV atomically; tuple cells are written as JSON lists."""
        df = self.to_dataframe(**filters)
        for col in df.columns:
            if df[col].map(lambda v: isinstance(v, tuple)).any():
                df[col] = df[col].map(lambda v: json.dumps(v) if isinstance(v, tuple) else v)
        return atomic_write_text(path, df.to_csv(index=False))

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"
