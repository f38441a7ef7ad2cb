"""Two real Zeek sessions of log traffic, to try the log readers without a Zeek at hand.

Recorded from Zeek 9.1 (zeek/zeek a13de64fbb) reading two of its own test
traces and logging over Broker (the project's ``tests/vectors/zeek-logs-*``
hold the full recordings, with the JSON logs Zeek wrote in the same run):

* ``dns-edns-ecs``: conn, dns, weird, reporter and broker logs (69 conn and 63
  dns records, IPv4 and IPv6);
* ``http-methods``: conn, http, files, weird, reporter and broker logs.

Each is the list of ``(topic, payload)`` messages Zeek sent, in order: the
LogCreates, then Batches of LogWrites, exactly as they went over the wire.
:func:`publish_sample` sends one from an endpoint, as that Zeek would.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import msgpack

__all__ = ["SAMPLES", "load_sample", "publish_sample"]

SAMPLES = ("dns-edns-ecs", "http-methods")


def load_sample(name: str) -> list[tuple[str, bytes]]:
    """The messages of a recorded session (one of :data:`SAMPLES`)."""
    if name not in SAMPLES:
        raise ValueError(f"no sample {name!r}; there are {', '.join(SAMPLES)}")
    raw = resources.files("broker_spark.zeek").joinpath(f"data/samples/{name}.msgpack").read_bytes()
    return [(str(topic), bytes(payload)) for topic, payload in msgpack.unpackb(raw, raw=False)]


def publish_sample(endpoint: Any, name: str) -> int:
    """Publish a recorded session's messages from ``endpoint`` (to its peers, as Zeek sent
    them: the bytes are Zeek's own); the number of messages sent."""
    messages = load_sample(name)
    endpoint.publish_encoded(messages)  # an Endpoint; not imported: zeek/ sits below it
    return len(messages)
