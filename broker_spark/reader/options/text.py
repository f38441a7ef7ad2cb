"""Reading the ``broker`` data source's option mapping: names, spellings, typed values.

Spark hands a data source its options as strings in a case-insensitive dict
with lower-cased keys; tests and direct callers may pass a plain dict spelled
as in the docs (``maxRecordsPerTrigger``) or Python values (``True``, ``100``).
:class:`RawOptions` takes either, knows every option's canonical name (so an
unknown one is an error that suggests the closest, and one of the other side
names where it applies) and reads values as booleans, choices, counts, sizes
and durations, each error naming the option and its value (a secret's value
never). What the options mean together is :mod:`~broker_spark.reader.options.reader`'
(readers) and :mod:`~broker_spark.reader.options.writer`' (writers).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from broker_spark.reader.options.catalog import READER, SHARED, WRITER
from broker_spark.reader.options.values import BrokerOptionError, is_secret_option
from broker_spark.reader.options.zeromq import ZEROMQ_CURVE

__all__ = [
    "FORMATS",
    "MODES",
    "READER_OPTIONS",
    "SHARED_OPTIONS",
    "SSL_FILES",
    "WRITER_OPTIONS",
    "ZEEK_LOG_TOPIC",
    "ZEROMQ_OPTIONS",
    "RawOptions",
    "seconds_option",
    "split_option",
]

FORMATS = ("default", "zeek", "zeek-logs")
MODES = ("PERMISSIVE", "FAILFAST")
#: Where Zeek publishes its logs (``Broker::default_log_topic_prefix``).
ZEEK_LOG_TOPIC = "zeek/logs/"

SSL_FILES = ("ssl.certificate", "ssl.key", "ssl.cafile", "ssl.capath", "ssl.passphrase")
ZEROMQ_OPTIONS = (
    "zeromq.logs",
    "zeromq.proxy",
    "zeromq.connectXsubEndpoint",
    "zeromq.connectXpubEndpoint",
    *ZEROMQ_CURVE,
)
#: The options of readers and writers alike, of readers only, of writers only (canonical
#: spellings), as :mod:`~broker_spark.reader.options.catalog` describes each.
SHARED_OPTIONS = tuple(SHARED)
READER_OPTIONS = tuple(READER)
WRITER_OPTIONS = tuple(WRITER)
#: Options Spark itself adds (ignored; a writer reads ``path`` as the log's path).
SPARK_ADDED = ("path", "checkpointLocation")

_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_SIZE = re.compile(r"([0-9]+)\s*([kmgt]?)(i?b)?\Z", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class RawOptions:
    """The given options by canonical name; remembers which were used for the unknown check."""

    def __init__(self, options: Mapping[str, Any], allowed: tuple[str, ...], other: str) -> None:
        canonical = {
            name.lower(): name for name in (*SHARED_OPTIONS, *READER_OPTIONS, *WRITER_OPTIONS)
        }
        allowed_lower = {name.lower() for name in allowed}
        ignored = {name.lower() for name in SPARK_ADDED}
        self.values: dict[str, str] = {}
        for key, value in options.items():
            lower = str(key).lower()
            if lower in ignored:
                continue
            if lower not in allowed_lower:
                if lower in canonical:
                    raise BrokerOptionError(canonical[lower], value, f"applies to {other} only")
                close = difflib.get_close_matches(lower, sorted(allowed_lower), n=1)
                hint = f" (did you mean {canonical[close[0]]}?)" if close else ""
                raise BrokerOptionError(str(key), value, f"unknown option{hint}")
            name = canonical[lower]
            text = _text(value)
            if name in self.values and self.values[name] != text:
                earlier = "***" if is_secret_option(name) else repr(self.values[name])
                raise BrokerOptionError(name, value, f"given twice, also as {earlier}")
            self.values[name] = text

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def nonempty(self, name: str) -> str | None:
        value = self.values.get(name)
        if value is None:
            return None
        if not value.strip():
            raise BrokerOptionError(name, value, "must not be empty")
        return value.strip()

    def boolean(self, name: str, default: bool) -> bool:
        value = self.values.get(name)
        if value is None:
            return default
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise BrokerOptionError(name, value, "expected true or false")
        return lowered == "true"

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self.values.get(name)
        if value is None:
            return default
        for choice in choices:
            if value.strip().lower() == choice.lower():
                return choice
        raise BrokerOptionError(name, value, f"expected one of {', '.join(choices)}")

    def positive_int(self, name: str) -> int | None:
        value = self.values.get(name)
        if value is None:
            return None
        if not _INTEGER.match(value.strip()) or int(value) < 1:
            raise BrokerOptionError(name, value, "expected a positive integer")
        return int(value)

    def limit(self, name: str, default: int | None, sizes: bool) -> int | None:
        """A positive count (with size suffixes when ``sizes``), or ``-1``/``none`` for no limit."""
        value = self.values.get(name)
        if value is None:
            return default
        text = value.strip()
        if text.lower() in ("-1", "none"):
            return None
        match = _SIZE.match(text) if sizes else None
        if match and (match.group(2) or not match.group(3) or match.group(3).lower() == "b"):
            number = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
        elif _INTEGER.match(text):
            number = int(text)
        else:
            expected = "a size such as 1048576, 512k, 64m or 1g" if sizes else "an integer"
            raise BrokerOptionError(name, value, f"expected {expected}, or -1 for no limit")
        if number < 1:
            raise BrokerOptionError(name, value, "must be positive, or -1 for no limit")
        return number


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def split_option(raw: RawOptions, name: str) -> list[str]:
    """A comma-separated list (``topics``, ``peer``, ``logs``): its items once each, in order."""
    value = raw.get(name)
    if value is None:
        return []
    items = list(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    if not items:
        raise BrokerOptionError(name, value, "names nothing")
    return items


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*(ms|s|min|m|h|)\Z")
_DURATION_UNITS = {"ms": 0.001, "": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def seconds_option(raw: RawOptions, name: str, default: float) -> float:
    """A duration in seconds (``2``, ``2s``, ``500ms``; 0 for none)."""
    value = raw.get(name)
    if value is None:
        return default
    match = _DURATION.match(value.strip().lower())
    if not match:
        raise BrokerOptionError(name, value, "expected a duration, such as 2, 2s, 500ms, 5m or 1h")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]
