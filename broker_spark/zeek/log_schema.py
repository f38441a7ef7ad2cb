"""Log schemas: the columns of a Zeek log stream, where they come from, and who said so.

Zeek sends a stream's columns once, in a LogCreate, and its records without
names (their values carry type tags only). So whoever decodes records keeps
a :class:`SchemaRegistry`: LogCreate messages feed it, keyed by the sender,
the stream and the path (a stream may write several paths, and two Zeeks may
declare the same stream with different columns); a LogWrite finds its names
there. :func:`standard_schema` adds the columns of Zeek's standard logs from
a real Zeek's own description (``data/log-schemas.json``), for when no
LogCreate has been seen.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from broker_spark.zeek.types import TypeTag, ZeekType

__all__ = [
    "STANDARD_SCHEMAS_ZEEK_VERSION",
    "LogField",
    "LogSchema",
    "SchemaRegistry",
    "standard_paths",
    "standard_schema",
    "standard_schemas",
]


@dataclass(frozen=True)
class LogField:
    """One column: its flattened name (``id.orig_h``), Zeek type and whether it may be unset.

    ``secondary_name`` is Zeek's second name of a column (set only by a few
    writers' configurations; None almost always).
    """

    name: str
    zeek_type: ZeekType
    optional: bool = False
    secondary_name: str | None = None

    @classmethod
    def of(cls, name: str, type_spec: str | ZeekType, optional: bool = False) -> LogField:
        """A field from a Zeek spelling of its type (``LogField.of("uid", "string")``)."""
        zeek_type = type_spec if isinstance(type_spec, ZeekType) else ZeekType.parse(type_spec)
        return cls(name, zeek_type, optional)

    @property
    def type(self) -> TypeTag:
        return self.zeek_type.tag

    @property
    def subtype(self) -> TypeTag:
        return self.zeek_type.subtag

    def __str__(self) -> str:
        return f"{self.name}: {self.zeek_type}{' &optional' if self.optional else ''}"


@dataclass(frozen=True)
class LogSchema:
    """The columns of one log: stream id (``Conn::LOG``), path (``conn``) and fields."""

    stream: str
    path: str
    fields: tuple[LogField, ...]
    source: str = field(default="", compare=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def types(self) -> tuple[ZeekType, ...]:
        return tuple(f.zeek_type for f in self.fields)

    def tags(self) -> tuple[int, ...]:
        """The type tag of each column, as every record's values carry them."""
        return tuple(int(f.type) for f in self.fields)

    def matches_tags(self, tags: Sequence[int]) -> bool:
        """Whether a record whose values carry ``tags`` has this layout."""
        return tuple(tags) == self.tags()

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "path": self.path,
            "columns": [
                {"name": f.name, "type": str(f.zeek_type), "optional": f.optional}
                for f in self.fields
            ],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any], source: str = "") -> LogSchema:
        fields = tuple(
            LogField.of(c["name"], c["type"], bool(c.get("optional", False)))
            for c in obj["columns"]
        )
        return cls(str(obj["stream"]), str(obj["path"]), fields, source)


#: The Zeek version whose description of its logs :func:`standard_schema` gives by default.
STANDARD_SCHEMAS_ZEEK_VERSION = "9.1.0-dev"

#: The descriptions shipped, by the Zeek release they describe: 9.1 (the newest, from a
#: running Zeek built from zeek/zeek a13de64fbb) and 9.0 (its base scripts are the same
#: files: 9.0.0-rc1 and a13de64fbb differ in no script), and 8.0 (8.0.10, the release
#: Zeek's ``lts`` tag names: 9.1's description with the differences of its base scripts
#: applied: dns lacks ``opcode`` and ``opcode_name``, ssh has ``host_key`` where 9.1 has
#: ``host_key_fingerprint``, and ``ntp_control``/``ntp_private`` do not exist). Each file
#: says how it was made (``made_with``).
STANDARD_SCHEMA_FILES = {
    "9.1": "data/log-schemas.json",
    "9.0": "data/log-schemas.json",
    "8.0": "data/log-schemas-8.0.json",
}


@lru_cache(maxsize=4)
def _standard(release: str = "9.1") -> tuple[dict[str, LogSchema], dict[str, LogSchema], str]:
    file = STANDARD_SCHEMA_FILES.get(release)
    if file is None:
        raise ValueError(
            f"no schemas of Zeek {release} are built in; there are "
            f"{', '.join(sorted(STANDARD_SCHEMA_FILES))}"
        )
    text = resources.files("broker_spark.zeek").joinpath(file).read_text()
    doc = json.loads(text)
    version = str(doc.get("zeek_version", STANDARD_SCHEMAS_ZEEK_VERSION))
    by_path: dict[str, LogSchema] = {}
    by_stream: dict[str, LogSchema] = {}
    for obj in doc["streams"]:
        schema = LogSchema.from_json(obj, source=f"standard (Zeek {version})")
        by_path.setdefault(schema.path, schema)
        by_stream.setdefault(schema.stream, schema)
    return by_path, by_stream, version


def standard_schema(name: str, zeek_version: str = "9.1") -> LogSchema | None:
    """The columns of one of Zeek's standard logs by path (``conn``) or stream
    (``Conn::LOG``), as the base scripts of Zeek ``zeek_version`` (``"9.1"``, the newest;
    ``"9.0"``; ``"8.0"``, the long-term-support release) declare them; None if unknown."""
    by_path, by_stream, _ = _standard(release_of(zeek_version))
    return by_path.get(name) or by_stream.get(name)


def standard_schemas(zeek_version: str = "9.1") -> list[LogSchema]:
    """Every standard log's schema, by path."""
    return sorted(_standard(release_of(zeek_version))[0].values(), key=lambda s: s.path)


def standard_paths(zeek_version: str = "9.1") -> list[str]:
    return sorted(_standard(release_of(zeek_version))[0])


def release_of(version: str) -> str:
    """``9.1.0-dev``, ``8.0.10`` or ``8.0`` as the major.minor release of its schemas."""
    return ".".join(str(version).split(".")[:2])


SchemaKey = tuple[str, str, str]  # (sender, stream, path)


class SchemaRegistry:
    """Schemas learned from LogCreate messages, by ``(sender, stream, path)``; thread-safe.

    :meth:`lookup` falls back from the exact sender to any sender's schema of
    that stream and path (records relayed through another endpoint arrive with
    that endpoint as sender); :meth:`learn` says whether the columns changed,
    so a reader can warn when a running stream's layout moves.
    """

    def __init__(self, schemas: Iterable[tuple[SchemaKey, LogSchema]] = ()) -> None:
        self._lock = threading.Lock()
        self._exact: dict[SchemaKey, LogSchema] = {}
        self._any: dict[tuple[str, str], LogSchema] = {}
        self.unnamed = 0  # records decoded without a known schema
        for key, schema in schemas:
            self.learn(key[0], schema)

    def learn(self, sender: str, schema: LogSchema) -> bool:
        """Remember ``schema`` for ``sender``; True when it is new or differs from the last."""
        key = (sender, schema.stream, schema.path)
        with self._lock:
            old = self._exact.get(key)
            self._exact[key] = schema
            self._any[(schema.stream, schema.path)] = schema
        return old is None or old.fields != schema.fields

    def lookup(self, sender: str, stream: str, path: str) -> LogSchema | None:
        with self._lock:
            found = self._exact.get((sender, stream, path))
            if found is None:
                found = self._any.get((stream, path))
        return found

    def by_path(self, path: str) -> LogSchema | None:
        """The last schema learned for a path, from any sender and stream."""
        with self._lock:
            for (_stream, p), schema in reversed(self._any.items()):
                if p == path:
                    return schema
        return None

    def items(self) -> list[tuple[SchemaKey, LogSchema]]:
        with self._lock:
            return list(self._exact.items())

    def __iter__(self) -> Iterator[LogSchema]:
        return iter([s for _, s in self.items()])

    def __len__(self) -> int:
        with self._lock:
            return len(self._exact)

    def __getstate__(self) -> dict[str, Any]:
        return {"items": self.items(), "unnamed": self.unnamed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["items"])  # type: ignore[misc]
        self.unnamed = state["unnamed"]
