"""``broker-spark logs [PATH...]``: Zeek's logs as they arrive, as Zeek's own JSON lines.

Like ``tail -f`` on the JSON logs of a remote Zeek: each record is printed as
exactly the line Zeek's JSON writer would write for it (``LogAscii::use_json``,
with ``--timestamps`` as ``LogAscii::json_timestamps``), one per line, in
arrival order. Given one PATH, the lines are that log's lines as Zeek writes
them; otherwise every line gets ``"_path"`` as its first key, so the logs can
be told apart (``jq 'select(._path == "dns")'``).

It peers with a Zeek that listens (``--peer``, as Zeek's ``Broker::listen``)
or listens for one that dials (``--listen``, as Zeek's ``Broker::peer``), and
subscribes to ``zeek/logs/`` (``--topic`` for others, such as a cluster
logger's node topic). A Zeek sends each log's columns right after peering,
so records arrive named; a record whose columns were not seen is named by
Zeek's standard log of its path, or by position (``_1``...).

With ``--zeromq-bind`` it is instead a logger of a Zeek cluster on the ZeroMQ
backend (Zeek 8.1 and later): a PULL socket Zeek's nodes PUSH their log batches
to (:mod:`broker_spark.zeromq.log_receiver`); every batch carries its columns.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from broker_spark.cli.args import (
    client_configuration,
    tls_flags,
)
from broker_spark.cli.errors import CliError
from broker_spark.cli.signals import stop_on_signals
from broker_spark.config import TLSSettings
from broker_spark.endpoint import Endpoint
from broker_spark.node.exposure import check_exposure
from broker_spark.node.settings import NodeSettings
from broker_spark.source_opener import (
    SourceError,
    SourceOpener,
    SourceUnreachable,
    open_zeromq_logs,
)
from broker_spark.topic import as_topic_str
from broker_spark.zeek.log_lines import LogLines
from broker_spark.zeek.text import json_quote
from broker_spark.zeromq.curve import CurveConfigError, CurveKeys

__all__ = ["run"]

log = logging.getLogger("broker_spark.cli")


def run(args: argparse.Namespace) -> int:

    topics = tuple(dict.fromkeys(as_topic_str(t) for t in (args.topic or ["zeek/logs/"])))
    paths = tuple(dict.fromkeys(args.paths))
    decoder = LogLines(paths or None, args.timestamps, args.include_unset)
    _check_exposure(args)
    if args.zeromq_bind is not None:
        receiver = zeromq_log_receiver(args.zeromq_bind)
        try:
            with stop_on_signals() as stop:
                printed = _print(args, receiver, decoder, len(paths) == 1, stop)
        finally:
            receiver.close()
    else:
        endpoint = Endpoint(client_configuration(args))
        try:
            subscription = endpoint.make_raw_subscriber(topics, qsize=8192)
            _connect(endpoint, args)
            with stop_on_signals() as stop:
                printed = _print(args, subscription, decoder, len(paths) == 1, stop)
            subscription.close()
        finally:
            endpoint.shutdown()
    if decoder.undecodable:
        log.warning("%d records did not decode and were left out", decoder.undecodable)
    if args.count and printed < args.count and not stop.is_set():
        raise CliError(f"timed out after {args.timeout:g} s with {printed} of {args.count} records")
    return 0


def _check_exposure(args: argparse.Namespace) -> None:
    """The node's rule (:mod:`broker_spark.node.exposure`): who may send us logs off loopback
    must be authenticated, unless ``--allow-anonymous``."""

    curve = None
    if args.zeromq_bind is not None:
        try:
            curve = CurveKeys.resolve(None)
        except CurveConfigError as exc:
            raise CliError(str(exc)) from None
    settings = NodeSettings(
        listen=args.listen if args.zeromq_bind is None else None,
        relay=None,
        zeromq_logs=args.zeromq_bind,
        tls=TLSSettings(disable_ssl=bool(args.no_tls), **tls_flags(args)),
        allow_anonymous=bool(args.allow_anonymous),
    )
    for warning in check_exposure(settings, curve, {"--zeromq-logs": "--zeromq-bind"}):
        log.warning("%s", warning)


def zeromq_log_receiver(bind: str) -> Any:
    """The ZeroMQ logger role for the command line (CURVE from Zeek's environment variables)."""

    try:
        return open_zeromq_logs(bind, CurveKeys.resolve(None))
    except (CurveConfigError, SourceError) as exc:
        raise CliError(str(exc)) from None


def _connect(endpoint: Any, args: argparse.Namespace) -> None:

    opener = SourceOpener(endpoint, endpoint.make_status_subscriber(False))
    if args.listen is not None:
        host, port = args.listen
        try:
            bound = opener.listen(host, port)
        except SourceError as exc:
            raise CliError(str(exc)) from None
        log.info("waiting for Zeek to peer on %s:%d", host, bound)
        return
    host, port = args.peer
    deadline = time.monotonic() + args.wait
    while True:
        try:
            opener.peer(host, port)
            break
        except SourceUnreachable as exc:
            if time.monotonic() >= deadline:
                raise CliError(f"{exc} (is Zeek listening there?)") from None
        except SourceError as exc:
            raise CliError(str(exc)) from None
        time.sleep(0.5)
    log.info("peered with %s:%d", host, port)


def _print(
    args: argparse.Namespace, subscription: Any, decoder: Any, one_log: bool, stop: Any
) -> int:
    out = sys.stdout
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    wanted = args.count
    printed = 0
    while not stop.is_set():
        wait = 0.25
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                break
        items = subscription.take(8192, wait)
        if not items:
            continue
        found = decoder.lines([(payload, sender) for _topic, payload, sender in items])
        if wanted is not None:
            found = found[: wanted - printed]
        if one_log:
            lines = "".join(line + "\n" for _path, line in found)
        else:
            lines = "".join(_with_path(path, line) + "\n" for path, line in found)
        if lines:
            out.write(lines)
            out.flush()
        printed += len(found)
        if wanted is not None and printed >= wanted:
            break
    return printed


def _with_path(path: str, line: str) -> str:

    head = '{"_path":' + json_quote(path)
    return head + ("," + line[1:] if len(line) > 2 else "}")
