"""Where a master keeps its data: in memory, or in a SQLite file that outlives it.

A backend is a plain key-value table with an optional absolute expiry time per
key (integer nanoseconds since the epoch; the master decides *when* to expire,
the backend only remembers). Keys are identified by their Broker binary
encoding, which is canonical, so ``Count(1)`` and ``1`` (count and integer) are
different keys as in Broker, and sets or tables work as keys.

:class:`SQLiteBackend` uses Broker's own schema (``store(key blob primary key,
value blob, expiry integer)`` with keys and values in Broker's binary encoding
and expiries in nanoseconds), runs in write-ahead-log mode, and batches writes
in transactions: a transaction commits after ``batch_size`` writes, on
:meth:`~StoreBackend.flush` (the master flushes on every tick), when a
:meth:`~StoreBackend.batch` block ends, and on :meth:`~StoreBackend.close`. A
master restarted on the same file therefore serves what was committed. Reads on
the same backend always see its own uncommitted writes.

A backend is not thread-safe: use it from one thread at a time (the core's loop).
"""

from __future__ import annotations

import abc
import enum
import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from broker_spark.data.binary import decode, encode
from broker_spark.data.types import DataType, Enum
from broker_spark.errors import EC, DecodeError, StoreError
from broker_spark.store.ops import MISSING, add_value, index_value, subtract_value

__all__ = [
    "Backend",
    "MemoryBackend",
    "SQLiteBackend",
    "StoreBackend",
    "open_backend",
]


class Backend(enum.IntEnum):
    """The backend kinds of ``attach_master`` (Broker's Python names)."""

    Memory = 0
    SQLite = 1


class StoreBackend(abc.ABC):
    """The operations a master needs; expiries are absolute nanosecond timestamps."""

    @abc.abstractmethod
    def lookup(self, key: Any) -> Any:
        """The value of ``key``, or :data:`~broker_spark.store.ops.MISSING`."""

    @abc.abstractmethod
    def put(self, key: Any, value: Any, expiry: int | None = None) -> None:
        """Insert or replace ``key``; ``expiry`` replaces any earlier one (None: never)."""

    def swap(self, key: Any, value: Any, expiry: int | None = None) -> Any:
        """:meth:`put` that returns the previous value (or MISSING): one lookup, not two."""
        old = self.lookup(key)
        self.put(key, value, expiry)
        return old

    @abc.abstractmethod
    def erase(self, key: Any) -> bool:
        """Remove ``key``; False if it was absent."""

    @abc.abstractmethod
    def expire(self, key: Any, now: int) -> bool:
        """Remove ``key`` only if it has an expiry at or before ``now``."""

    @abc.abstractmethod
    def clear(self) -> None: ...

    @abc.abstractmethod
    def keys(self) -> list[Any]: ...

    @abc.abstractmethod
    def size(self) -> int: ...

    @abc.abstractmethod
    def snapshot(self) -> tuple[tuple[Any, Any], ...]:
        """Every (key, value) pair, for a clone's handshake."""

    @abc.abstractmethod
    def expiries(self) -> list[tuple[Any, int]]:
        """Every (key, expiry) pair of keys that expire, for a (re)started master."""

    def get(self, key: Any) -> Any:
        """The value of ``key``; StoreError(NoSuchKey) if absent."""
        value = self.lookup(key)
        if value is MISSING:
            raise StoreError(f"no such key: {key!r}", EC.NoSuchKey)
        return value

    def exists(self, key: Any) -> bool:
        return self.lookup(key) is not MISSING

    def get_index(self, key: Any, index: Any) -> Any:
        """``get_index_from_value``: membership, table lookup or vector index."""
        return index_value(self.get(key), index)

    def add(self, key: Any, value: Any, init_type: DataType, expiry: int | None = None) -> Any:
        """Apply Broker's add; returns the new value. On error nothing changes."""
        new = add_value(self.lookup(key), value, init_type)
        self.put(key, new, expiry)
        return new

    def subtract(self, key: Any, value: Any, expiry: int | None = None) -> Any:
        """Apply Broker's subtract; returns the new value. On error nothing changes."""
        new = subtract_value(self.lookup(key), value)
        self.put(key, new, expiry)
        return new

    def flush(self) -> None:
        """Make every write so far durable (no-op for memory)."""
        return None

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group writes: nothing is committed inside the block, all of it at its end."""
        yield

    def close(self) -> None:
        """Flush and release resources; idempotent."""
        return None


class MemoryBackend(StoreBackend):
    """A dict keyed by the canonical encoding of each key."""

    def __init__(self, opts: Mapping[str, Any] | None = None) -> None:
        self._d: dict[bytes, tuple[Any, Any, int | None]] = {}

    def lookup(self, key: Any) -> Any:
        entry = self._d.get(encode(key))
        return MISSING if entry is None else entry[1]

    def put(self, key: Any, value: Any, expiry: int | None = None) -> None:
        self._d[encode(key)] = (key, value, expiry)

    def swap(self, key: Any, value: Any, expiry: int | None = None) -> Any:
        k = encode(key)
        d = self._d
        old = d.get(k)
        d[k] = (key, value, expiry)
        return MISSING if old is None else old[1]

    def erase(self, key: Any) -> bool:
        return self._d.pop(encode(key), None) is not None

    def expire(self, key: Any, now: int) -> bool:
        k = encode(key)
        entry = self._d.get(k)
        if entry is None or entry[2] is None or entry[2] > now:
            return False
        del self._d[k]
        return True

    def clear(self) -> None:
        self._d.clear()

    def keys(self) -> list[Any]:
        return [entry[0] for entry in self._d.values()]

    def size(self) -> int:
        return len(self._d)

    def snapshot(self) -> tuple[tuple[Any, Any], ...]:
        return tuple((entry[0], entry[1]) for entry in self._d.values())

    def expiries(self) -> list[tuple[Any, int]]:
        return [(e[0], e[2]) for e in self._d.values() if e[2] is not None]

    def replace_all(self, pairs: Any) -> None:
        """Drop everything and load ``pairs`` (a clone applying a snapshot)."""
        self._d = {encode(k): (k, v, None) for k, v in pairs}


_SCHEMA = (
    "create table if not exists meta(key text primary key, value text);",
    "create table if not exists store(key blob primary key, value blob, expiry integer);",
)
_JOURNAL_MODES = ("WAL", "DELETE")
_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def _enum_option(opts: Mapping[str, Any], name: str, prefix: str, allowed: tuple[str, ...]) -> Any:
    """Read an option given as text or as Broker's enum (``Broker::SQLITE_JOURNAL_MODE_WAL``)."""
    raw = opts.get(name)
    if raw is None:
        return None
    text = raw.name if isinstance(raw, Enum) else raw
    if not isinstance(text, str):
        raise StoreError(f"SQLite option {name!r} must be a string or enum, got {raw!r}")
    if text.startswith(prefix):
        text = text[len(prefix) :]
    if text.upper() not in allowed:
        raise StoreError(f"SQLite option {name!r}: {raw!r} is not one of {', '.join(allowed)}")
    return text.upper()


class SQLiteBackend(StoreBackend):
    """Broker's SQLite layout through the standard library, in WAL mode with batched commits."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        batch_size: int = 1000,
        journal_mode: str = "WAL",
        synchronous: str = "NORMAL",
        integrity_check: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = batch_size
        self._pending = 0  # writes in the open transaction
        self._depth = 0  # nesting of batch() blocks
        self._db: sqlite3.Connection | None = None
        self._db = self._open(journal_mode, synchronous, integrity_check)

    @classmethod
    def from_opts(cls, opts: Mapping[str, Any]) -> SQLiteBackend:
        """Build from ``attach_master`` options: ``path`` (required) and Broker's extras."""
        path = opts.get("path")
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise StoreError(
                f"the SQLite backend needs opts['path'] as a file path, got {path!r}",
                EC.CannotOpenFile,
            )
        kwargs: dict[str, Any] = {}
        mode = _enum_option(opts, "journal_mode", "Broker::SQLITE_JOURNAL_MODE_", _JOURNAL_MODES)
        if mode:
            kwargs["journal_mode"] = mode
        sync = _enum_option(opts, "synchronous", "Broker::SQLITE_SYNCHRONOUS_", _SYNC_MODES)
        if sync:
            kwargs["synchronous"] = sync
        if "integrity_check" in opts:
            kwargs["integrity_check"] = bool(opts["integrity_check"])
        if "batch_size" in opts:
            kwargs["batch_size"] = int(opts["batch_size"])
        return cls(path, **kwargs)

    # -- opening ------------------------------------------------------------------

    def _open(
        self, journal_mode: str, synchronous: str, integrity_check: bool
    ) -> sqlite3.Connection:
        path = self.path
        if journal_mode.upper() not in _JOURNAL_MODES or synchronous.upper() not in _SYNC_MODES:
            raise StoreError(f"SQLite store {path}: bad journal_mode or synchronous option")
        directory = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the directory of SQLite store {path}: {exc}", EC.CannotOpenFile
            ) from None
        if os.path.isdir(path):
            raise StoreError(f"SQLite store {path} is a directory", EC.CannotOpenFile)
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite store {path}: {exc}", EC.CannotOpenFile) from None
        try:
            mode = db.execute(f"PRAGMA journal_mode={journal_mode}").fetchone()[0]
            if journal_mode.upper() == "WAL" and str(mode).lower() not in ("wal", "memory"):
                raise StoreError(
                    f"SQLite store {path}: cannot switch to WAL mode (got {mode})",
                    EC.BackendFailure,
                )
            db.execute(f"PRAGMA synchronous={synchronous}")
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute("replace into meta(key, value) values('broker_spark_schema', '1')")
            columns = [row[1] for row in db.execute("PRAGMA table_info(store)")]
            if columns[:3] != ["key", "value", "expiry"]:
                raise StoreError(
                    f"SQLite store {path}: table 'store' has columns {columns}, "
                    f"expected key, value, expiry",
                    EC.BackendFailure,
                )
            db.execute("select count(*) from store").fetchone()
            if integrity_check:
                result = [row[0] for row in db.execute("PRAGMA integrity_check")]
                if result != ["ok"]:
                    raise StoreError(
                        f"SQLite store {path} failed its integrity check: {result[:5]}",
                        EC.BackendFailure,
                    )
        except StoreError:
            db.close()
            raise
        except sqlite3.Error as exc:
            db.close()
            raise StoreError(f"SQLite store {path}: {exc}", self._code_for(exc)) from None
        return db

    @staticmethod
    def _code_for(exc: sqlite3.Error) -> EC:
        text = str(exc).lower()
        if "unable to open" in text or "readonly" in text or "read-only" in text:
            return EC.CannotOpenFile
        return EC.BackendFailure

    # -- plumbing -------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(f"SQLite store {self.path} is closed", EC.BackendFailure)
        return self._db

    def _fail(self, exc: Exception) -> StoreError:
        return StoreError(f"SQLite store {self.path}: {exc}", EC.BackendFailure)

    def _write(self, sql: str, args: tuple) -> int:
        db = self._conn()
        try:
            if not db.in_transaction:
                db.execute("BEGIN")
            rows = db.execute(sql, args).rowcount
        except sqlite3.Error as exc:
            raise self._fail(exc) from None
        self._pending += 1
        if self._pending >= self.batch_size and self._depth == 0:
            self.flush()
        return rows

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            return self._conn().execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise self._fail(exc) from None

    def _decode(self, blob: bytes, what: str) -> Any:
        try:
            return decode(blob)
        except DecodeError as exc:
            raise StoreError(
                f"SQLite store {self.path}: undecodable {what}: {exc}", EC.BackendFailure
            ) from None

    # -- the interface ----------------------------------------------------------------

    def lookup(self, key: Any) -> Any:
        rows = self._read("select value from store where key = ?", (encode(key),))
        return self._decode(rows[0][0], "value") if rows else MISSING

    def put(self, key: Any, value: Any, expiry: int | None = None) -> None:
        self._write(
            "replace into store(key, value, expiry) values(?, ?, ?)",
            (encode(key), encode(value), expiry),
        )

    def erase(self, key: Any) -> bool:
        return self._write("delete from store where key = ?", (encode(key),)) > 0

    def expire(self, key: Any, now: int) -> bool:
        sql = "delete from store where key = ? and expiry is not null and expiry <= ?"
        return self._write(sql, (encode(key), now)) > 0

    def clear(self) -> None:
        self._write("delete from store", ())

    def keys(self) -> list[Any]:
        return [self._decode(row[0], "key") for row in self._read("select key from store")]

    def size(self) -> int:
        return int(self._read("select count(*) from store")[0][0])

    def snapshot(self) -> tuple[tuple[Any, Any], ...]:
        rows = self._read("select key, value from store")
        return tuple((self._decode(k, "key"), self._decode(v, "value")) for k, v in rows)

    def expiries(self) -> list[tuple[Any, int]]:
        rows = self._read("select key, expiry from store where expiry is not null")
        return [(self._decode(k, "key"), int(e)) for k, e in rows]

    def flush(self) -> None:
        db = self._db
        if db is None or not db.in_transaction:
            self._pending = 0
            return
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._fail(exc) from None
        self._pending = 0

    @contextmanager
    def batch(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0:
            self.flush()

    def close(self) -> None:
        if self._db is None:
            return
        try:
            self.flush()
        finally:
            self._db.close()
            self._db = None


def open_backend(kind: Backend | int, opts: Mapping[str, Any] | None = None) -> StoreBackend:
    """The backend ``attach_master(name, kind, opts)`` asks for; errors at open time."""
    opts = opts or {}
    try:
        kind = Backend(kind)
    except ValueError:
        raise StoreError(f"unknown store backend {kind!r}", EC.BackendFailure) from None
    if kind is Backend.Memory:
        return MemoryBackend(opts)
    return SQLiteBackend.from_opts(opts)
