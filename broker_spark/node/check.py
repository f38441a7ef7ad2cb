"""A node's settings read and checked without starting (``broker-spark node --check``).

Everything :func:`broker_spark.node.run.serve` reads before it binds (the TOML and
flags, TLS files, CURVE keys, tokens, the spool's folder, the metrics' TLS) is read
here the same way, so a systemd unit's ``ExecStartPre`` or an operator's edit fails
before a running relay is stopped for it. The node's start uses :func:`metrics_tls`
and :func:`where` too. What it finds comes back as lines; the command prints them.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from broker_spark.addresses import format_host_port
from broker_spark.config import TLSSettings
from broker_spark.exits import CliError, UsageError
from broker_spark.node.exposure import check_exposure
from broker_spark.node.reload import metrics_context
from broker_spark.node.settings import NodeSettings, check_tls
from broker_spark.node.sources import curve_keys
from broker_spark.tls import make_contexts

__all__ = ["check", "check_folder", "metrics_tls", "where"]


def check(settings: NodeSettings) -> list[str]:
    """Everything :func:`broker_spark.node.run.serve` reads before it binds, read and
    checked (the TOML and flags, the options, TLS files, CURVE keys, tokens, the spool's
    folder and the metrics' TLS); the lines that say what would run (warnings first), or
    CliError on the first fault."""
    lines: list[str] = []
    say = lines.append
    config = settings.configuration()
    check_tls(config)
    try:
        contexts = make_contexts(TLSSettings.of(config))
    except (ValueError, OSError, ssl.SSLError) as exc:
        raise CliError(f"TLS: {exc}") from None
    curve = curve_keys(settings.curve)
    for warning in check_exposure(settings, curve):
        say(f"warning: {warning}")
    if settings.spool_dir:
        check_folder(settings.spool_dir, "the spool")
        if not settings.spool_topics:
            raise UsageError("--spool needs topics to keep: --subscribe PREFIX (repeatable)")
        if settings.spool_readers and (contexts is None or not contexts.authenticated):
            raise UsageError("--reader needs mutual TLS (--cert, --key and --ca)")
    if settings.log_dir:
        check_folder(settings.log_dir, "--log-dir")
    metrics_tls(settings)
    tls = (
        "plain TCP"
        if contexts is None
        else ("mutual TLS" if contexts.authenticated else "anonymous TLS")
    )
    say(f"configuration OK: {tls}")
    for name, value in (
        ("listen", settings.listen and where(settings.listen)),
        ("spool", settings.spool_dir),
        ("relay", settings.spool_dir and settings.relay and where(settings.relay)),
        ("zeromq logs", settings.zeromq_logs),
        ("metrics", settings.metrics and where(settings.metrics)),
    ):
        if value:
            say(f"  {name:12} {value}")
    if settings.spool_dir:
        age = settings.spool_retention_seconds
        size = settings.spool_retention_bytes
        say(
            f"  {'retention':12} {f'{age:g} s' if age else 'no age limit'}, "
            f"{f'{size} bytes' if size else 'no size limit'}; fsync {settings.spool_fsync}, "
            f"compression {settings.spool_compression}, to readers {settings.relay_compression}"
        )
        say(
            f"  {'decoding':12} "
            + (
                f"the rows of {settings.relay_decoders} log readers' tasks at once"
                if settings.relay_decoders
                else "none (readers' tasks decode the records they fetch)"
            )
        )
    return lines


def check_folder(path: str, what: str) -> None:
    """``path`` is a folder this user may write, or one it may make."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(os.path.abspath(probe))
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise CliError(f"{what}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise CliError(f"{what}: {probe} is not writable by this user")


def where(address: tuple[str, int]) -> str:
    return format_host_port(*address)


def metrics_tls(settings: NodeSettings) -> Any:
    """The metrics' TLS context (None: plain HTTP); CliError when its files do not load."""
    try:
        contexts = make_contexts(TLSSettings.of(settings.configuration()))
        return metrics_context(settings, contexts)
    except (ValueError, OSError, ssl.SSLError) as exc:
        raise CliError(f"metrics TLS: {exc}") from None
