"""What a receiver process and the readers that attach to it agree on.

The files a receiver keeps in its spool folder (``receiver.json``, ``receiver.log``), the
socket it listens on, and its identity: the options that must be the same between a
receiver and a reader attaching to it (secrets as digests). The receiver
(:mod:`.receiver`) and the readers' side (:mod:`.receiver_attach`) both take them from
here, so attaching needs nothing of the receiver's own process code.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping

from broker_spark.reader.options import ReaderOptions

__all__ = [
    "INFO_FILE",
    "LOG_FILE",
    "SOCKET_FILE",
    "identity_of",
    "identity_problem",
    "socket_path",
]

INFO_FILE = "receiver.json"
LOG_FILE = "receiver.log"
SOCKET_FILE = "receiver.sock"

#: Unix socket paths longer than this do not fit ``sockaddr_un`` everywhere (108 on Linux,
#: 104 on BSDs and macOS).
_MAX_SOCKET_PATH = 100


def socket_path(spool_path: str) -> str:
    """Where the receiver of ``spool_path`` listens: in the folder when the path fits."""
    inside = os.path.join(os.path.abspath(spool_path), SOCKET_FILE)
    if len(os.fsencode(inside)) <= _MAX_SOCKET_PATH:
        return inside
    digest = hashlib.sha256(os.fsencode(os.path.abspath(spool_path))).hexdigest()[:20]
    return os.path.join(tempfile.gettempdir(), f"bs-receiver-{digest}.sock")


# --- who may attach ---------------------------------------------------------------------------


def identity_of(options: ReaderOptions, *, logs: bool) -> dict[str, str]:
    """What must agree between a receiver and a reader attaching to it, by option name."""
    conn = options.connection
    ssl = conn.ssl
    spool = options.spool
    zeromq = conn.zeromq
    secret = _digest(ssl.passphrase) if ssl.passphrase else ""
    return {
        "listen": str(conn.listen) if conn.listen else "",
        "peer": ",".join(str(p) for p in conn.peers),
        "websocket": conn.websocket.url if conn.websocket else "",
        "topics": ",".join(options.topics),
        "ssl.disable": str(ssl.disable_ssl).lower(),
        "ssl.certificate": ssl.certificate,
        "ssl.key": ssl.key,
        "ssl.cafile": ssl.cafile,
        "ssl.capath": ssl.capath,
        "ssl.passphrase": secret,
        "spool.segmentBytes": str(spool.segment_bytes),
        "spool.retentionBytes": str(spool.retention_bytes),
        "spool.retentionMs": str(spool.retention_ms),
        "spool.fsync": str(spool.fsync).lower(),
        "format": "zeek-logs" if logs else "messages",
        "zeromq.logs": zeromq.logs or "",
        "zeromq.proxy": f"{zeromq.xsub},{zeromq.xpub}" if zeromq.proxy else "",
        "zeromq.curve": _digest(",".join(zeromq.curve)) if any(zeromq.curve) else "",
    }


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:16]


def identity_problem(ours: Mapping[str, str], theirs: Mapping[str, str]) -> str | None:
    """Why a reader with identity ``theirs`` cannot use a receiver started with ``ours``."""
    differ = [k for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
    if not differ:
        return None

    def shown(key: str, value: str | None) -> str:
        if key in ("ssl.passphrase", "zeromq.curve"):
            return "(other secrets)" if value else "(none)"
        return repr(value or "")

    parts = [
        f"{k}: receiver {shown(k, ours.get(k))}, this query {shown(k, theirs.get(k))}"
        for k in differ
    ]
    return "its receiver was started with other options (" + "; ".join(parts) + ")"
