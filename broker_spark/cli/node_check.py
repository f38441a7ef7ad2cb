"""``broker-spark node --check``: a node's configuration read and checked without starting.

Everything :func:`broker_spark.cli.node.serve` reads before it binds (the TOML and
flags, TLS files, CURVE keys, tokens, the spool's folder, the metrics' TLS) is read
here the same way, so a systemd unit's ``ExecStartPre`` or an operator's edit fails
before a running relay is stopped for it. The node's start uses :func:`metrics_tls`,
:func:`where` and :func:`say` too.
"""

from __future__ import annotations

import os
from typing import Any

from broker_spark.addresses import format_host_port
from broker_spark.cli.args import check_tls
from broker_spark.cli.errors import CliError, UsageError
from broker_spark.cli.exposure import check_exposure
from broker_spark.cli.node_config import NodeSettings
from broker_spark.cli.node_sources import curve_keys

__all__ = ["check", "check_folder", "metrics_tls", "say", "where"]


def check(settings: NodeSettings) -> int:
    """``node --check``: everything :func:`broker_spark.cli.node.serve` reads before it binds, read and checked
    (the TOML and flags, the options, TLS files, CURVE keys, tokens, the spool's folder and
    the metrics' TLS); prints what would run, and raises CliError on the first fault."""
    import ssl

    from broker_spark.config import TLSSettings
    from broker_spark.tls import make_contexts

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
    return 0


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


def say(line: str) -> None:
    print(line, flush=True)


def metrics_tls(settings: NodeSettings) -> Any:
    """The metrics' TLS context (None: plain HTTP); CliError when its files do not load."""
    import ssl

    from broker_spark.cli.node_reload import metrics_context
    from broker_spark.config import TLSSettings
    from broker_spark.tls import make_contexts

    try:
        contexts = make_contexts(TLSSettings.of(settings.configuration()))
        return metrics_context(settings, contexts)
    except (ValueError, OSError, ssl.SSLError) as exc:
        raise CliError(f"metrics TLS: {exc}") from None
