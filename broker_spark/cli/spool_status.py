"""``broker-spark status --spool DIR | --relay HOST:PORT`` and ``broker-spark receiver stop DIR``.

A spool's status comes from its owner over the spool protocol: a query's
receiver through its Unix socket, a relay over TCP (TLS as the flags say).
With no receiver running, the spool itself still tells its offsets, size
and oldest record. Shown: the peers, the spool's first and next offset, its
bytes, its oldest record's age, a failure (a full disk) and each reader with
its committed offset and lag.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from broker_spark.cli.args import client_configuration
from broker_spark.cli.errors import CliError
from broker_spark.cli.tables import table
from broker_spark.config import TLSSettings
from broker_spark.reader.receiver_attach import ReceiverError, receiver_status, stop_receiver
from broker_spark.spool.relay_client import RelayError, SpoolClient, SpoolClientError
from broker_spark.spool.service import spool_id, spool_summary
from broker_spark.spool.spool import Spool, SpoolError
from broker_spark.tls import make_contexts

__all__ = [
    "STATUS_FIELDS",
    "format_spool_status",
    "run_spool_status",
]

#: Every key of a spool's status (``status --spool/--relay --json``, ``[]``: each element of
#: a list) and what it means. docs/reference/status.md is generated from here, and
#: tests/test_reference.py fails on a key a relay's status has and this lacks, or the reverse.
STATUS_FIELDS = {
    "path": "the spool's folder, as its owner named it",
    "id": "the spool's id (its `relay-id` file): a query keeps its offsets by it",
    "owner": "who holds the spool: `relay HOST:PORT`, `receiver pid N, node ID`, or null (none "
    "running: the spool as it lies on disk)",
    "since": "a receiver's start, seconds since the epoch (receivers only)",
    "topics": "the topic prefixes the spool keeps",
    "start": "the first offset the spool holds",
    "end": "the next offset (`end - start` records are held)",
    "bytes": "the bytes of the spool's files",
    "oldest_age_s": "seconds since the oldest record held arrived (null when empty)",
    "error": "why appending stopped (a full disk), or null",
    "paused": "true while the node takes nothing because its disk has less than "
    "`disk_min_free_bytes` free (it takes again by itself when space returns)",
    "disk_free_bytes": "bytes free on the spool's file system",
    "disk_min_free_bytes": "the free space below which the node stops taking "
    "(`--spool-min-free`; 0: no guard)",
    "fsync": "when appends reach the disk: `never`, `interval` (each second) or `always`",
    "compression": "how the spool's filled files are compressed: `zstd`, `lz4` or `none` "
    "(the file being written is kept as written)",
    "retention_bytes": "the size beyond which the oldest files are dropped (null: no size limit)",
    "retention_seconds": "the age beyond which the oldest files are dropped (null: no age limit)",
    "peers": "the node's Broker peers, an entry each",
    "peers[].id": "a Broker peer's endpoint id",
    "peers[].address": "its `host:port`",
    "peers[].status": "its peering status (`Peered`, `Connecting`, ...)",
    "sources": "where messages come from, an entry per kind of source that brought or "
    "refused anything, or is configured",
    "sources[].kind": "`broker`, `websocket`, `zeromq-proxy` or `zeromq-logs`",
    "sources[].name": "the source as configured (an endpoint, a URL)",
    "sources[].arrived": "messages appended from it",
    "sources[].refused": "what it turned away, by reason (`undecodable`, `connection`, "
    "`malformed`)",
    "sources[].connected": "links up now (`websocket`, `zeromq-proxy`)",
    "sources[].endpoint": "the PULL socket's bound endpoint (`zeromq-logs`)",
    "sources[].curve": "whether the PULL socket requires CURVE (`zeromq-logs`)",
    "sources[].batches_received": "log batches taken from the PULL socket (`zeromq-logs`)",
    "sources[].queued": "batches taken from the PULL socket and not yet appended "
    "(`zeromq-logs`; bounded, since it takes only as fast as the spool appends)",
    "sources[].undecodable": "messages from it that did not decode, kept in the spool as "
    "undecodable records",
    "sources[].error": "why the source's figures could not be read (a source that is gone)",
    "listeners": "the node's listening ports, an entry each",
    "listeners[].listener": "a listening port: `relay`, `peering`, `websocket`, `metrics`",
    "listeners[].address": "where it listens",
    "listeners[].connections": "connections it serves now",
    "listeners[].unidentified": "of those, the ones that have not said who they are yet "
    "(TLS, HELLO or handshake not done): at most half of `limit`",
    "listeners[].limit": "the most it serves at once",
    "listeners[].per_address": "the most it serves from one address",
    "listeners[].refused": "clients it turned away, by reason (`too-many`, `per-address`, "
    "`unidentified`, `unauthorized`, `tls`, `timeout`, `protocol`, `forbidden`)",
    "readers": "the readers connected now, an entry each",
    "readers[].name": "the name a reader gave (a Spark reader: its query and task)",
    "readers[].role": "`follow` (a query's planning or task), `attach` (a query on the owner's "
    "machine) or `status`",
    "readers[].address": "where it connected from (`local`: the Unix socket)",
    "readers[].connected_s": "seconds since it connected",
    "readers[].committed": "the offset its query committed last (null before the first)",
    "readers[].next": "the next offset it is sent (null unless following)",
}


def run_stop(args: argparse.Namespace) -> int:

    if not os.path.isdir(args.spool):
        raise CliError(f"{args.spool} is not a folder")
    try:
        pid = stop_receiver(args.spool)
    except ReceiverError as exc:
        raise CliError(str(exc)) from None
    print(f"stopped the receiver of {args.spool} (pid {pid})" if pid else "no receiver running")
    return 0


def spool_status(args: argparse.Namespace) -> dict[str, Any]:
    """The status of ``--spool`` or ``--relay`` as a dict."""

    if args.relay is not None:
        host, port = args.relay
        tls = _client_tls(args)
        try:
            with SpoolClient.tcp(host, port, tls) as client:
                client.hello("status", "broker-spark status")
                status = client.request("status")["status"]
        except (SpoolClientError, RelayError) as exc:
            raise CliError(str(exc)) from None
        status["owner"] = f"relay {host}:{port}"
        return status

    path = os.path.abspath(args.spool)
    if not os.path.isdir(path):
        raise CliError(f"{args.spool} is not a folder")
    running = receiver_status(path, "broker-spark status")
    if running is None:  # no receiver, or receiver.json of one that died: the spool itself
        return _offline(path)
    info, status = running
    status["owner"] = f"receiver pid {info.get('pid')}, node {info.get('node')}"
    status["since"] = info.get("started")
    return status


def _offline(path: str) -> dict[str, Any]:

    try:
        with Spool(path, readonly=True) as spool:
            status = spool_summary(spool)
    except (SpoolError, OSError) as exc:
        raise CliError(f"{path}: not a spool ({exc})") from None
    status.update(owner=None, id=spool_id(path, create=False), peers=[], readers=[], error=None)
    return status


def _client_tls(args: argparse.Namespace) -> Any:

    contexts = make_contexts(TLSSettings.of(client_configuration(args)))
    return contexts.client if contexts is not None else None


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit} ago"
    return f"{seconds:.1f} s ago"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def format_spool_status(status: dict[str, Any]) -> list[str]:
    start, end = status["start"], status["end"]
    owner = status.get("owner") or "none running (the spool as it lies on disk)"
    if status.get("since"):
        owner += f", up {time.time() - float(status['since']):.0f} s"
    lines = [
        f"spool          {status.get('path', '-')}  (id {status.get('id') or '-'})",
        f"owner          {owner}",
    ]
    if status.get("topics"):
        lines.append(f"topics         {', '.join(status['topics'])}")
    peers = status.get("peers") or []
    lines.append(f"peers          {len(peers)}")
    for p in peers:
        lines.append(f"  {p.get('address') or '-'}  {p.get('id') or '-'}  {p.get('status')}")
    sources = status.get("sources") or []
    if sources:
        lines.append(f"sources        {len(sources)}")
        rows = [["KIND", "NAME", "ARRIVED", "REFUSED"]]
        for s in sources:
            rows.append(
                [
                    str(s.get("kind")),
                    str(s.get("name")),
                    f"{s.get('arrived', 0):,}",
                    _refusals(s.get("refused")),
                ]
            )
        lines += table(rows)
    lines += [
        f"offsets        first {start:,}, next {end:,} ({end - start:,} records held)",
        f"bytes          {_bytes(int(status.get('bytes') or 0))}",
        f"oldest record  {_age(status.get('oldest_age_s'))}",
        f"error          {status.get('error') or '-'}",
    ]
    listeners = status.get("listeners") or []
    if listeners:
        lines.append(f"listeners      {len(listeners)}")
        rows = [["LISTENER", "ADDRESS", "CONNECTIONS", "REFUSED"]]
        for x in listeners:
            rows.append(
                [
                    str(x.get("listener")),
                    str(x.get("address") or "-"),
                    f"{x.get('connections', 0)} of {x.get('limit', '?')}",
                    _refusals(x.get("refused")),
                ]
            )
        lines += table(rows)
    readers = status.get("readers") or []
    lines.append(f"readers        {len(readers)}")
    if readers:
        rows = [["NAME", "ROLE", "ADDRESS", "CONNECTED", "COMMITTED", "LAG"]]
        for r in readers:
            committed = r.get("committed")
            lag = f"{end - committed:,}" if isinstance(committed, int) else "-"
            rows.append(
                [
                    str(r.get("name") or "-"),
                    str(r.get("role")),
                    str(r.get("address")),
                    f"{r.get('connected_s', 0):.0f} s",
                    f"{committed:,}" if isinstance(committed, int) else "-",
                    lag,
                ]
            )
        lines += table(rows)
    return lines


def _refusals(refused: dict[str, int] | None) -> str:
    """``reason n, reason n`` of what a source or listener turned away, or ``-``."""
    said = ", ".join(f"{reason} {n:,}" for reason, n in sorted((refused or {}).items()) if n)
    return said or "-"


def run_spool_status(args: argparse.Namespace) -> int:
    status = spool_status(args)
    text = json.dumps(status, indent=2) if args.json else "\n".join(format_spool_status(status))
    sys.stdout.write(text + "\n")
    return 0
