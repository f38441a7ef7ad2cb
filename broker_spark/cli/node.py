"""``broker-spark node``: run an endpoint from flags and/or a TOML file until interrupted.

On start it prints, on stdout, one line per fact a script may need, and
nothing else: ``node <id>``, ``listening on HOST:PORT``, ``websocket
listening on HOST:PORT``, ``relay listening on HOST:PORT`` (``--spool``) and
finally ``ready`` (ports are the bound ones, so port 0 works). Peer events and errors go to the log (stderr). SIGINT or
SIGTERM shuts the endpoint down cleanly (goodbyes to peers, stores closed)
and exits 0.

Flags override the file, setting by setting: ``--peer`` given once replaces
the file's whole list of peers, ``--cert`` replaces only the certificate.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading

from broker_spark.cli.args import tls_flags
from broker_spark.cli.errors import CliError, UsageError
from broker_spark.cli.parsers.node import CURVE_FLAGS, METRICS_TOKEN_ENV, WEBSOCKET_TOKEN_ENV
from broker_spark.cli.signals import stop_on_signals
from broker_spark.node.check import check
from broker_spark.node.settings import NodeSettings, load_node_config, secret_text

__all__ = ["run", "say", "settings_from"]


def settings_from(args: argparse.Namespace) -> NodeSettings:
    """The file's settings (or the defaults), overridden by each flag given."""
    s = load_node_config(args.config) if args.config else NodeSettings()
    if args.listen is not None:
        s.listen = args.listen
    if args.no_listen:
        s.listen = None
    for flag, name in (
        ("peer", "peers"),
        ("retry", "retry"),
        ("websocket", "websocket"),
        ("forward", "forward"),
        ("master", "masters"),
        ("clone", "clones"),
        ("log_dir", "log_dir"),
        ("log_rotate", "log_rotate"),
        ("log_topic", "log_topics"),
        ("spool", "spool_dir"),
        ("subscribe", "spool_topics"),
        ("relay", "relay"),
        ("spool_retention", "spool_retention_bytes"),
        ("spool_max_age", "spool_retention_seconds"),
        ("spool_segment", "spool_segment_bytes"),
        ("spool_min_free", "spool_min_free_bytes"),
        ("spool_fsync", "spool_fsync"),
        ("spool_compression", "spool_compression"),
        ("relay_compression", "relay_compression"),
        ("relay_decoders", "relay_decoders"),
        ("zeromq_logs", "zeromq_logs"),
        ("zeromq_proxy", "zeromq_proxy"),
        ("websocket_peer", "websocket_peers"),
        ("metrics", "metrics"),
        ("metrics_cert", "metrics_certificate"),
        ("metrics_key", "metrics_key"),
        ("connections_per_address", "connections_per_address"),
    ):
        value = getattr(args, flag)
        if value is not None:
            setattr(s, name, value)
    flags = {CURVE_FLAGS[f]: getattr(args, f) for f in CURVE_FLAGS if getattr(args, f)}
    if flags:  # flags replace the file's keys as a whole: a pair must come from one place
        s.curve = flags
    s.tls = s.tls.replace(**tls_flags(args))
    for flag, name, env in (
        ("websocket_token", "websocket_token", WEBSOCKET_TOKEN_ENV),
        ("metrics_token", "metrics_token", METRICS_TOKEN_ENV),
    ):
        value = getattr(args, flag)
        if value is not None:
            setattr(s, name, secret_text(value, "--" + flag.replace("_", "-")))
        elif not getattr(s, name) and os.environ.get(env):
            setattr(s, name, os.environ[env])
    if s.spool_retention_bytes == 0:
        s.spool_retention_bytes = None  # --spool-retention none
    if args.metrics_tls:
        s.metrics_tls = True
    if args.allow_anonymous:
        s.allow_anonymous = True
    if args.reader:  # flags replace the file's table as a whole
        s.spool_readers = dict(args.reader)
    if args.no_relay:
        s.relay = None
    if args.no_tls:
        s.tls = s.tls.replace(disable_ssl=True)
    if args.ttl is not None:
        s.options["ttl"] = args.ttl
    if args.no_forwarding:
        s.options["disable_forwarding"] = True
    return s


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if settings.zeromq_logs and not settings.log_dir and not settings.spool_dir:
        raise CliError(
            "--zeromq-logs needs --spool DIR (keep the logs for Spark readers) and/or "
            "--log-dir DIR (write them into files)"
        )
    if settings.metrics is not None and not settings.spool_dir:
        raise UsageError("--metrics shows a spool and its sources: give --spool DIR too")
    if args.log_level is None and settings.log_level:
        logging.getLogger("broker_spark").setLevel(settings.log_level.upper())
    if args.check:
        for line in check(settings):
            say(line)
        return 0
    # Here, not at the top, for start-up time (measured, issue 52): serve's modules (the
    # endpoint, the spool, ZeroMQ, the metrics) are 0.26 s of CPU that `node --check`
    # (0.12 s in all) never needs.
    from broker_spark.node.serve import serve

    reload = threading.Event()
    with stop_on_signals(reload=reload) as stop:
        serve(settings, stop, reload, lambda: settings_from(args), announce=say)
    return 0


def say(line: str) -> None:
    """A line for scripts, on stdout at once (``node <id>``, ..., ``ready``)."""
    print(line, flush=True)
