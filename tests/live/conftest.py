"""The live tests (``make test-live``): a real Zeek against broker-spark, on loopback.

Every module here starts Zeek processes and broker-spark processes and checks what
arrives against what Zeek itself wrote or printed. A run without a Zeek fails (it
never skips): :mod:`zeek_procs` says where it looks for one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for folder in (HERE.parent, HERE):  # tests/ (spark_fixtures, ports...) and tests/live/
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from cluster import (  # noqa: E402
    CurveKeys,
    Site,
    ZeekCluster,
    deploy_layout,
    make_certs,
    relay_nodes,
)
from doc_snippets import layout_nodes  # noqa: E402
from ports import free_port  # noqa: E402
from zeek_procs import Oracle, ZeekMissing, zeek_binary  # noqa: E402


@pytest.fixture(scope="session")
def zeek() -> Path:
    """The Zeek the live tests run; the run fails, naming what to do, without one."""
    try:
        return zeek_binary()
    except ZeekMissing as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture(scope="session")
def oracle(zeek: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Oracle]:
    """Zeek's own JSON logs of each trace, from a standalone Zeek (read once a run)."""
    yield Oracle(zeek, tmp_path_factory.mktemp("oracle"))


@pytest.fixture(scope="session")
def zeromq_site(zeek: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """docs/how-to/zeek-cluster-zeromq.md's site, running: Zeek's manager and proxy (no workers yet), both relay
    nodes (relay 1 in the cluster's proxy, for events). Tests run its workers on traces."""
    folder = tmp_path_factory.mktemp("zeromq-site")
    keys = CurveKeys.new()
    certs = make_certs(folder / "certs", "relay1", "relay2", "reader")
    xpub, xsub = free_port(), free_port()
    relays = relay_nodes(
        folder, certs, keys, ["relay1", "relay2"], f"tcp://127.0.0.1:{xpub},tcp://127.0.0.1:{xsub}"
    )
    loggers = {f"logger-{i + 1}": int(r.pull.rsplit(":", 1)[1]) for i, r in enumerate(relays)}
    layout = deploy_layout(loggers)
    assert sorted(n for n, t in layout_nodes(layout).items() if t == "LOGGER") == sorted(loggers)
    cluster = ZeekCluster(
        zeek, folder / "zeek", layout, keys, xpub=xpub, xsub=xsub, websocket=free_port()
    )
    try:
        cluster.start_control()
        for relay in relays:
            relay.start()
        yield Site(cluster, relays, certs, folder, keys)
    finally:
        for relay in relays:
            relay.close()
        cluster.close()
