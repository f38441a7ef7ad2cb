"""Memory and SQLite backends: the same behaviour, persistence, WAL, batching, bad files."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.data.binary import encode
from broker_spark.data.types import Count, DataType, Enum
from broker_spark.errors import EC, StoreError
from broker_spark.store.backends import (
    Backend,
    MemoryBackend,
    SQLiteBackend,
    StoreBackend,
    open_backend,
)
from broker_spark.store.ops import MISSING


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], StoreBackend]]:
    opened: list[StoreBackend] = []

    def factory() -> StoreBackend:
        if request.param == "memory":
            backend: StoreBackend = MemoryBackend()
        else:
            backend = SQLiteBackend(tmp_path / "store.db", batch_size=7)
        opened.append(backend)
        return backend

    yield factory
    for backend in opened:
        backend.close()


def _state(backend: StoreBackend) -> list[tuple[bytes, bytes]]:
    return sorted((encode(k), encode(v)) for k, v in backend.snapshot())


def test_basic_operations(make: Callable[[], StoreBackend]) -> None:
    b = make()
    assert b.size() == 0 and b.lookup("a") is MISSING and not b.exists("a")
    b.put("a", 1)
    b.put(Count(1), "count key")
    b.put(1, "integer key")
    b.put({1, 2}, "set key")
    b.put(("v", 1), {"nested": (1, 2)})
    assert b.get("a") == 1
    assert b.get(Count(1)) == "count key" and b.get(1) == "integer key"  # distinct types
    assert b.get({2, 1}) == "set key"
    assert b.get(("v", 1)) == {"nested": (1, 2)}
    assert b.size() == 5
    assert sorted(map(encode, b.keys())) == sorted(
        map(encode, ["a", Count(1), 1, {1, 2}, ("v", 1)])
    )
    b.put("a", 2)
    assert b.get("a") == 2 and b.size() == 5
    assert b.erase("a") and not b.erase("a")
    with pytest.raises(StoreError) as info:
        b.get("a")
    assert info.value.code is EC.NoSuchKey
    b.clear()
    assert b.size() == 0 and b.keys() == [] and b.snapshot() == ()


def test_expiry_bookkeeping(make: Callable[[], StoreBackend]) -> None:
    b = make()
    b.put("e", 1, expiry=1000)
    b.put("f", 2, expiry=5000)
    b.put("g", 3)
    assert sorted(b.expiries()) == [("e", 1000), ("f", 5000)]
    assert not b.expire("e", 999)  # not due yet
    assert not b.expire("g", 10**18)  # never expires
    assert b.expire("e", 1000)
    assert not b.exists("e")
    b.put("f", 2)  # a later put without expiry cancels the old one
    assert b.expiries() == []
    assert not b.expire("f", 10**18)


def test_add_subtract_and_index(make: Callable[[], StoreBackend]) -> None:
    b = make()
    assert b.add("n", 5, DataType.Integer) == 5
    assert b.add("n", 5, DataType.Integer, expiry=99) == 10
    assert b.expiries() == [("n", 99)]
    assert b.subtract("n", 3) == 7
    assert b.expiries() == []
    b.add("s", "x", DataType.Set)
    b.add("t", ("k", 1), DataType.Table)
    b.add("v", "first", DataType.Vector)
    assert b.get_index("s", "x") is True
    assert b.get_index("t", "k") == 1
    assert b.get_index("v", 0) == "first"
    assert b.subtract("v", "v") == ()


def test_failed_operations_change_nothing(make: Callable[[], StoreBackend]) -> None:
    b = make()
    b.put("text", "abc", expiry=50)
    before = _state(b)
    for bad in (
        lambda: b.add("text", 1, DataType.Integer),
        lambda: b.subtract("text", 1),
        lambda: b.subtract("missing", 1),
        lambda: b.add("missing", "x", DataType.None_),
        lambda: b.get_index("missing", 0),
    ):
        with pytest.raises(StoreError):
            bad()
    assert _state(b) == before
    assert b.expiries() == [("text", 50)]
    assert not b.exists("missing")


ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from("abcd"), st.integers(-3, 3)),
        st.tuples(st.just("erase"), st.sampled_from("abcd"), st.none()),
        st.tuples(st.just("add"), st.sampled_from("abcd"), st.integers(-3, 3)),
        st.tuples(st.just("sub"), st.sampled_from("abcd"), st.integers(-3, 3)),
        st.tuples(st.just("push"), st.sampled_from("abcd"), st.text(max_size=2)),
        st.tuples(st.just("clear"), st.none(), st.none()),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(ops_strategy)
def test_memory_and_sqlite_agree(tmp_path_factory: pytest.TempPathFactory, steps: list) -> None:
    path = tmp_path_factory.mktemp("agree") / "s.db"
    backends = [MemoryBackend(), SQLiteBackend(path, batch_size=4)]
    try:
        for kind, key, arg in steps:
            outcomes = []
            for b in backends:
                try:
                    if kind == "put":
                        b.put(key, arg)
                    elif kind == "erase":
                        b.erase(key)
                    elif kind == "add":
                        b.add(key, arg, DataType.Integer)
                    elif kind == "sub":
                        b.subtract(key, arg)
                    elif kind == "push":
                        b.add(key, arg, DataType.Vector)
                    else:
                        b.clear()
                    outcomes.append(None)
                except StoreError as exc:
                    outcomes.append(exc.code)
            assert outcomes[0] == outcomes[1]
        assert _state(backends[0]) == _state(backends[1])
    finally:
        for b in backends:
            b.close()


# -- SQLite specifics -------------------------------------------------------------------


def test_sqlite_restart_serves_the_same_data(tmp_path: Path) -> None:
    path = tmp_path / "persist" / "kv.db"  # the directory is created
    b = SQLiteBackend(path)
    b.put("a", 1)
    b.put(Count(7), {"x": (1, 2)}, expiry=123)
    b.add("n", 5, DataType.Integer)
    before = _state(b)
    b.close()
    b.close()  # idempotent
    again = SQLiteBackend(path)
    try:
        assert _state(again) == before
        assert again.expiries() == [(Count(7), 123)]
    finally:
        again.close()


def test_sqlite_uses_brokers_schema_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    b = SQLiteBackend(path)
    b.put("k", "v", expiry=42)
    b.close()
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = raw.execute("select key, value, expiry from store").fetchall()
        assert rows == [(encode("k"), encode("v"), 42)]
    finally:
        raw.close()


def test_sqlite_batches_writes_in_transactions(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    b = SQLiteBackend(path, batch_size=3)
    other = sqlite3.connect(path)

    def visible() -> int:
        return other.execute("select count(*) from store").fetchone()[0]

    try:
        b.put("a", 1)
        b.put("b", 2)
        assert b.size() == 2  # our own writes are visible to us at once
        assert visible() == 0  # but not committed yet
        b.put("c", 3)  # the third write completes a batch
        assert visible() == 3
        b.put("d", 4)
        assert visible() == 3
        b.flush()
        assert visible() == 4
        with b.batch():
            for i in range(10):
                b.put(i, i)
            assert visible() == 4  # no commit inside a batch block
        assert visible() == 14
    finally:
        other.close()
        b.close()


def test_sqlite_corrupt_file_fails_at_open_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not a database " * 200)
    with pytest.raises(StoreError) as info:
        SQLiteBackend(path)
    assert info.value.code in (EC.BackendFailure, EC.CannotOpenFile)
    assert str(path) in str(info.value)


def test_sqlite_foreign_table_layout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    raw = sqlite3.connect(path)
    raw.execute("create table store(a, b)")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError) as info:
        SQLiteBackend(path)
    assert info.value.code is EC.BackendFailure and str(path) in str(info.value)


@pytest.mark.parametrize("where", ["under_a_file", "a_directory"])
def test_sqlite_unwritable_path_fails_at_open_naming_the_path(tmp_path: Path, where: str) -> None:
    if where == "under_a_file":
        blocker = tmp_path / "plain-file"
        blocker.write_text("x")
        path = blocker / "kv.db"
    else:
        path = tmp_path / "dir.db"
        path.mkdir()
    with pytest.raises(StoreError) as info:
        SQLiteBackend(path)
    assert info.value.code is EC.CannotOpenFile
    assert str(path) in str(info.value)


def test_sqlite_closed_backend_reports_failure(tmp_path: Path) -> None:
    b = SQLiteBackend(tmp_path / "kv.db")
    b.close()
    with pytest.raises(StoreError) as info:
        b.put("a", 1)
    assert info.value.code is EC.BackendFailure


def test_open_backend_from_attach_master_options(tmp_path: Path) -> None:
    assert isinstance(open_backend(Backend.Memory), MemoryBackend)
    b = open_backend(
        Backend.SQLite,
        {
            "path": str(tmp_path / "kv.db"),
            "journal_mode": Enum("Broker::SQLITE_JOURNAL_MODE_WAL"),
            "synchronous": Enum("Broker::SQLITE_SYNCHRONOUS_FULL"),
            "integrity_check": True,
        },
    )
    assert isinstance(b, SQLiteBackend)
    b.close()
    with pytest.raises(StoreError) as info:
        open_backend(Backend.SQLite, {})
    assert info.value.code is EC.CannotOpenFile
    with pytest.raises(StoreError):
        open_backend(Backend.SQLite, {"path": str(tmp_path / "x.db"), "journal_mode": "MAYBE"})
    with pytest.raises(StoreError):
        open_backend(7)
    assert Backend.Memory == 0 and Backend.SQLite == 1
