"""Small helpers every layer uses: atomic file writes, content hashes, one-line errors, dotpaths,
timestamps, JSON-lines reading and strict number checks."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` via a temporary file in the same folder and `os.replace`, so readers
    see either the old or the new file, never a partial one. The file gets the permissions a plain
    `open(path, "w")` would (0666 less the umask), not the temporary file's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot hash {type(obj).__name__}: convert it to plain data first")


def canonical_json(obj: Any) -> str:
    """Canonical JSON text: sorted keys, no whitespace, tuples as lists, dataclasses as dicts.
    NaN / infinity are rejected because they have no canonical JSON form."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_jsonable
    )


def finite_or_null(obj: Any) -> Any:
    """`obj` with every NaN or infinite float replaced by None, tuples as lists (nested)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(v) for v in obj]
    return obj


def strict_json(obj: Any, indent: int | None = 2) -> str:
    """JSON that every parser reads (RFC 8259): NaN and infinities become null, never `Infinity`;
    other non-JSON values (paths, dates) become strings."""
    return json.dumps(finite_or_null(obj), indent=indent, allow_nan=False, default=str)


def content_hash(obj: Any) -> str:
    """sha256 hex digest of `canonical_json(obj)`; equal structures give equal hashes
    (dict key order and tuple-vs-list do not matter)."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def first_line(err: BaseException) -> str:
    """The first line of an error's message (a KeyError's key unquoted), or its type name."""
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    text = text.strip()
    return text.splitlines()[0] if text else type(err).__name__


def locate(dotpath: str) -> Any:
    """The object at a public dotpath such as `specsparse.drafters.pld.PromptLookupDrafter`."""
    module_name, _, attribute = dotpath.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"cannot import {dotpath!r} ({err}): check the `_target_` in the config") from None


def file_in_the_way(folder: str | os.PathLike) -> Path | None:
    """The file that stops `folder` from being a folder (itself, or its nearest existing ancestor
    when that is not a folder), or None."""
    path = Path(folder)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    return existing if existing is not None and not existing.is_dir() else None


def folder_problem(folder: str | os.PathLike) -> str | None:
    """Why `folder` cannot be made (a file in the way, a read-only or virtual filesystem, no permission),
    or None. A folder probed in its nearest existing ancestor, and removed at once, tells what a check of
    permission bits cannot (root on a read-only mount, /proc)."""
    if (blocker := file_in_the_way(folder)) is not None:
        return f"{blocker} is a file"
    path = Path(folder).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if existing == path:
        return None if os.access(path, os.W_OK | os.X_OK) else f"{path} is not writable"
    probe = existing / f".specsparse-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as err:
        return f"no folder can be made in {existing} ({err.strerror or first_line(err)})"
    return None


# Filesystems where SQLite's locking (and its WAL mode's shared memory) is documented not to work.
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "lustre", "gpfs", "beegfs", "ceph",
                       "fuse.ceph", "glusterfs", "fuse.glusterfs", "afs", "9p", "fuse.juicefs", "fuse.s3fs", "fuse.gcsfuse")


def network_filesystem(path: str | os.PathLike, mounts: str | None = None) -> str | None:
    """The type of the network filesystem `path` (symlinks resolved; it need not exist yet) lives on, or
    None for a local one. `mounts`: the text of /proc/mounts (read here when None; no such file: None)."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return None
    target = Path(os.path.realpath(path)).as_posix()
    best, kind = "", None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fields[2]
    return kind if kind in NETWORK_FILESYSTEMS else None


def utc_now() -> str:
    """The current time, UTC, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_sha256(directory: str | os.PathLike) -> dict[str, str]:
    """SHA-256 of a checkpoint directory's config and weight files (a retrained checkpoint in the
    same place then gets new result keys); cached per (file, size, mtime)."""
    files = sorted(p for p in Path(directory).iterdir()
                   if p.is_file() and (p.name == "config.json" or p.suffix in (".safetensors", ".bin")))
    return {p.name: _cached_sha256(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files}


@functools.lru_cache(maxsize=64)
def _cached_sha256(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """(line number, parsed record) for every non-blank line of a JSON-lines file. Raises ValueError
    naming the file and line of invalid JSON or of bytes that are not UTF-8, FileNotFoundError for a
    missing file."""
    path = Path(path)
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path}:{number}: not UTF-8 text: save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not valid JSON ({err.msg})") from None


def is_int(value: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)
