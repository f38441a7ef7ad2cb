"""``broker-spark publish TOPIC [VALUE...]``: publish values given as JSON, then make sure they arrived.

Values come from the arguments or, without any, from standard input (or
``--file``), one JSON text per line (see :mod:`broker_spark.cli.values` for
how JSON maps to Broker's types). The command exits only after the node it
peered with has read every message (see :meth:`Client.finish`), so
``publish`` in a script is done when it returns.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from broker_spark.cli.client_endpoint import Client
from broker_spark.cli.errors import CliError, UsageError
from broker_spark.cli.progress import Progress
from broker_spark.cli.signals import stop_on_signals
from broker_spark.cli.values import parse_value
from broker_spark.demo.events import ConnectionEvents, ConnectionLogs
from broker_spark.topic import as_topic_str
from broker_spark.zeek import Event
from broker_spark.zeek.script_types import SignatureError, parse_signature
from broker_spark.zeek.typed_values import convert

__all__ = ["run"]

log = logging.getLogger("broker_spark.cli")

#: Bytes read from the input at a time; every complete line in it goes out in one batch.
READ_SIZE = 64 * 1024

#: Longest input line accepted (the JSON decoder's own limit).
MAX_LINE = 16 * 1024 * 1024


def _signature(args: argparse.Namespace) -> Any:
    """The parsed ``--signature`` (None without one); a usage error when it is not Zeek's."""
    if not args.signature:
        return None

    if args.event or args.string:
        raise UsageError("--signature names the event: no --event or --string with it")
    try:
        return parse_signature(args.signature)
    except SignatureError as exc:
        raise UsageError(f"--signature: {exc}") from None


def _typed_event(signature: Any, values: Any) -> Any:
    """An event of ``signature`` from its arguments: a sequence, or a mapping by name."""

    params = signature.params
    if isinstance(values, dict):
        names = {p.name for p in params}
        extra = sorted(set(values) - names)
        if extra:
            raise ValueError(f"{extra[0]!r} is no argument of {signature}")
        values = [values.get(p.name) for p in params]
    if not isinstance(values, (tuple, list)) or len(values) != len(params):
        count = len(values) if isinstance(values, (tuple, list)) else 1
        raise ValueError(f"{signature.name} takes {len(params)} arguments, not {count}")
    converted = [
        convert(v, p.type, f"argument {p.name}") for v, p in zip(values, params, strict=True)
    ]
    return Event(signature.name, *converted)


def _converter(args: argparse.Namespace) -> Callable[[str], Any]:
    """Text of one value (or, with --event, one argument list) to what is published."""

    signature = _signature(args)
    if signature is not None:
        return lambda text: _typed_event(signature, parse_value(text))
    if args.string:
        return (lambda text: Event(args.event, text)) if args.event else (lambda text: text)
    if not args.event:
        return lambda text: parse_value(text, args.infer)

    def event(text: str) -> Any:
        value = parse_value(text, args.infer)
        if not isinstance(value, tuple):
            raise ValueError("with --event each line must be a JSON array of the arguments")
        return Event(args.event, *value)

    return event


def _values_from_arguments(args: argparse.Namespace) -> list[Any]:
    """The VALUE arguments, checked before anything connects (a bad one is a usage error)."""
    convert = (lambda text: text) if args.string else (lambda t: parse_value(t, args.infer))
    values = []
    for i, text in enumerate(args.values, 1):
        try:
            values.append(convert(text))
        except ValueError as exc:
            raise UsageError(f"VALUE {i} ({text[:40]!r}): {exc}") from None
    signature = _signature(args)
    if signature is not None:
        try:
            return [_typed_event(signature, values)]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.event:
        return [Event(args.event, *values)]
    return values


def run(args: argparse.Namespace) -> int:

    topic = as_topic_str(args.topic)
    from_input = not args.values and not args.generate
    if args.generate and (args.values or args.file or args.event or args.signature):
        raise UsageError(
            "--generate makes its own events: no VALUEs, --file, --event or --signature"
        )
    if args.generate and not args.rate:
        raise UsageError("--rate must be more than 0")
    if args.values and args.file:
        raise UsageError("give VALUEs or --file, not both")
    values = _values_from_arguments(args) if args.values else []
    with Client(args) as client:
        client.connect()
        if args.await_subscriber:
            _await_subscriber(client, topic, args.await_subscriber)
        publisher = client.endpoint.make_publisher(topic)
        bad_input = None
        if args.generate:
            count = _generate(args, publisher)
        elif from_input:
            try:
                count = _publish_input(args, publisher)
            except CliError as exc:  # a bad line: what came before it is still delivered
                bad_input, count = exc, 0
        else:
            publisher.publish_batch(*values)
            count = len(values)
        client.finish(publisher)
        if bad_input is not None:
            raise bad_input
    what = {"conn": "record", "conn-events": "event"}.get(args.generate or "", "message")
    log.info("published %d %s%s on %s to %s", count, what, "s"[count == 1 :], topic, client.target)
    return 0


def _await_subscriber(client: Any, topic: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        if any(topic.startswith(t.string()) for t in client.endpoint.peer_subscriptions()):
            return
        if time.monotonic() >= deadline:
            raise CliError(f"no subscriber of {topic} known to {client.target} after {seconds:g} s")
        time.sleep(0.02)


def _publish_input(args: argparse.Namespace, publisher: Any) -> int:

    if args.file and args.file != "-":
        stream = open(args.file, "rb")  # noqa: SIM115 - closed below
        size: int | None = os.fstat(stream.fileno()).st_size or None
        name = args.file
    else:
        stream = sys.stdin.buffer
        size = None
        name = "stdin"
        if stream.isatty():
            log.info("reading one JSON value per line from the terminal; Ctrl-D ends")
    progress = Progress("published", args.progress or sys.stderr.isatty(), size)
    convert = _converter(args)
    published = 0
    try:
        for number, lines, nbytes in _line_batches(stream.fileno()):
            batch = []
            for offset, raw in enumerate(lines):
                try:
                    text = _text(raw)
                    if not text.strip():
                        continue
                    batch.append(convert(text))
                except ValueError as exc:
                    where = f"{name} line {number + offset}"
                    if not args.skip_invalid:
                        publisher.publish_batch(*batch)
                        raise CliError(f"{where}: {exc}") from None
                    log.warning("%s: %s (skipped)", where, exc)
            publisher.publish_batch(*batch)
            published += len(batch)
            progress.add(len(batch), nbytes)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    progress.done()
    return published


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None


def _generate(args: argparse.Namespace, publisher: Any) -> int:
    """Publish the demo's connections at ``--rate`` until ``--seconds`` or a signal.

    Paced against the clock: each tick publishes what is due since the start,
    in one batch, so the rate holds whatever the tick's jitter. Log records go
    after their LogCreate, in Batches, as a Zeek sends them.
    """

    events: Any = ConnectionLogs() if args.generate == "conn" else ConnectionEvents()
    unit = "records" if args.generate == "conn" else "events"
    greeting = [value for _topic, value in events.greeting(args.topic)]
    if greeting:
        publisher.publish_batch(*greeting)
    progress = Progress("published", args.progress or sys.stderr.isatty(), unit=unit)
    published = 0
    start = time.monotonic()
    end = None if args.seconds is None else start + args.seconds
    # The whole run's count, from the arguments: (start + seconds) - start is not always
    # seconds in floating point, and 2000/s for 0.2 s must be 400 events, not 399.
    total = None if args.seconds is None else round(args.rate * args.seconds)
    log.info("publishing %g %s %s/s on %s", args.rate, args.generate, unit, args.topic)
    with stop_on_signals() as stop:
        while not stop.is_set():
            now = time.monotonic()
            finished = end is not None and now >= end
            target = total if finished else int(args.rate * (now - start))
            if total is not None:
                target = min(target, total)
            due = target - published
            if due > 0:
                publisher.publish_batch(*[v for _t, v in events.messages(due, args.topic)])
                published += due
                progress.add(due)
            if finished:
                break
            stop.wait(0.05)
    progress.done()
    return published


def _line_batches(fd: int) -> Iterator[tuple[int, list[bytes], int]]:
    """``(number of the first line, complete lines, bytes)`` for each read from ``fd``.

    ``os.read`` returns what is available, so lines trickling in from a pipe go
    out as they come, and a fast producer fills whole batches.
    """
    pending = b""
    number = 1
    while True:
        chunk = os.read(fd, READ_SIZE)
        if not chunk:
            break
        data = pending + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > MAX_LINE:
                raise CliError(f"line {number} is longer than {MAX_LINE} bytes")
            pending = data
            continue
        lines = data[:cut].split(b"\n")
        pending = data[cut + 1 :]
        yield number, lines, len(chunk)
        number += len(lines)
    if pending:
        yield number, [pending], 0
