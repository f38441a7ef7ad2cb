"""``broker-spark subscribe TOPIC...``: print what arrives, one JSON line per message.

Runs until interrupted (Ctrl-C or SIGTERM, exit 0), until ``--count`` messages
arrived, or for ``--timeout`` seconds; a lost connection to the node ends it
with an error. Lines are flushed as messages arrive, so the output can be
piped into ``jq`` or back into ``publish``.
"""

from __future__ import annotations

import argparse
import logging
import select
import sys
import time
from typing import Any

from broker_spark.cli.client_endpoint import Client
from broker_spark.cli.errors import CliError
from broker_spark.cli.signals import stop_on_signals
from broker_spark.cli.values import render_message
from broker_spark.topic import as_topic_str

__all__ = ["run"]

log = logging.getLogger("broker_spark.cli")

#: Messages the subscriber may hold before the flow to it pauses.
QUEUE_SIZE = 4096


def run(args: argparse.Namespace) -> int:

    topics = tuple(dict.fromkeys(as_topic_str(t) for t in args.topics))
    with Client(args, watch=True) as client:
        sub = client.endpoint.make_subscriber(topics, qsize=QUEUE_SIZE)
        client.connect(topics)
        log.info("subscribed to %s via %s", " ".join(topics), client.target)
        with stop_on_signals() as stop:
            received = _print_messages(args, client, sub, stop)
    if args.count and received < args.count:
        if stop.is_set():
            return 0
        raise CliError(
            f"timed out after {args.timeout:g} s with {received} of {args.count} messages"
        )
    return 0


def _print_messages(args: argparse.Namespace, client: Any, sub: Any, stop: Any) -> int:
    """Print until stopped, counted out or timed out; the number of messages printed."""
    out = sys.stdout
    fmt = args.format
    wanted = args.count
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    received = 0
    fd = sub.fd()
    while not stop.is_set():
        wait = 0.25
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                break
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            reason = client.lost()
            if reason is not None:
                raise CliError(f"lost the connection to {client.target}: {reason}")
            continue
        items = sub.poll()
        if wanted is not None:
            items = items[: wanted - received]
        if items:
            out.write("".join(render_message(t, v, fmt) + "\n" for t, v in items))
            out.flush()
            received += len(items)
        if wanted is not None and received >= wanted:
            break
    return received
