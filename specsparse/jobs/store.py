"""Append-only results store: every Measurement ever taken, keyed by a content hash.

The store is the source of truth for sweeps: a measurement is a pure function of everything that
affects it (model, drafter, domain split, candidate, generation settings, seed, ...), so its key is
`content_hash` of that description, and the description itself is kept next to it as `meta`.

Storage is one SQLite file in WAL mode. Each `put` is one transaction, so a process killed mid-sweep
loses at most the measurement in flight and the file stays readable. Rows are never updated or
deleted; putting an existing key is a no-op.

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
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from specsparse.types import Measurement, PromptResult
from specsparse.util import atomic_write_text, canonical_json

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

# Measurement fields that become dataframe columns (everything except per_prompt and chunk_counts).
SCALAR_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Measurement) if f.name not in ("per_prompt", "chunk_counts")
)


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    """Plain JSON-ready dict of a Measurement, per_prompt included."""
    return dataclasses.asdict(m)


# Rows stored before modeled figures were named so (their values are re-priced when served anyway).
EARLIER_NAMES = {"cost": "modeled_cost", "tokens_per_s": "modeled_tokens_per_s", "verify_cost": "modeled_verify_cost"}


def measurement_from_dict(d: Mapping[str, Any]) -> Measurement:
    """Inverse of `measurement_to_dict`; unknown keys (from newer versions) are ignored."""
    names = {f.name for f in dataclasses.fields(Measurement)}
    prompt_names = {f.name for f in dataclasses.fields(PromptResult)}
    d = {EARLIER_NAMES.get(k, k): v for k, v in d.items()}
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
    """The store file cannot be used (not SQLite, truncated, corrupt); the message is one line."""


class ResultsStore:
    """Append-only SQLite store of Measurements.

    >>> store = ResultsStore("outputs/results.sqlite")          # doctest: +SKIP
    >>> key = content_hash(description)                           # doctest: +SKIP
    >>> store.get(key) or store.put(key, evaluate(...), description)  # doctest: +SKIP

    One connection, guarded by a lock, is the single writer of this process.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per put.
        self._conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL is crash-safe for process death in WAL mode (only power loss can drop the last commits).
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)
            # quick_check reads every page once (well under a second for 10k rows): damage shows now,
            # not in the middle of a sweep.
            problem = self._conn.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as err:
            problem = str(err)
        if problem != "ok":
            self._conn.close()
            raise StoreError(
                f"results store {self.path} is damaged ({problem}): move it aside and rerun "
                "(measurements are remeasured), or point paths.store at another file"
            )

    # -- single measurements -------------------------------------------------------------------
    def get(self, key: str) -> Measurement | None:
        """The Measurement stored under `key`, or None."""
        with self._lock:
            row = self._conn.execute("SELECT measurement FROM measurements WHERE key = ?", (key,)).fetchone()
        return None if row is None else measurement_from_dict(json.loads(row[0]))

    def get_meta(self, key: str) -> dict[str, Any] | None:
        """The description stored with `key`, or None."""
        with self._lock:
            row = self._conn.execute("SELECT meta FROM measurements WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, measurement: Measurement, meta: Mapping[str, Any]) -> bool:
        """Store `measurement` under `key` with its description `meta`, in one transaction.

        Returns True if it was written, False if `key` already existed (nothing is changed then).
        """
        meta_text = canonical_json(dict(meta))
        m_text = json.dumps(measurement_to_dict(measurement))
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                cur = self._conn.execute(
                    "INSERT OR IGNORE INTO measurements (key, meta, measurement, created) VALUES (?, ?, ?, ?)",
                    (key, meta_text, m_text, time.time()),
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        written = cur.rowcount == 1
        if not written:
            log.debug("store: key %s already present, put ignored", key[:12])
        return written

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM measurements WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]

    # -- tables --------------------------------------------------------------------------------
    def _iter_raw(self) -> Iterator[tuple[str, str, str, float]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT key, meta, measurement, created FROM measurements ORDER BY seq"
            ).fetchall()
        yield from rows

    def described(self) -> Iterator[tuple[dict[str, Any], Measurement]]:
        """(meta, Measurement with its per-prompt results) of every stored measurement, in insertion order."""
        for _, meta_text, m_text, _ in self._iter_raw():
            yield json.loads(meta_text), measurement_from_dict(json.loads(m_text))

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
            for name, value in flatten(json.loads(meta_text)).items():
                row[f"meta.{name}" if name in reserved else name] = value
            m = json.loads(m_text)
            row.update({name: m.get(name) for name in SCALAR_FIELDS})
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
