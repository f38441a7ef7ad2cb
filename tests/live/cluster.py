"""A Zeek cluster on the ZeroMQ backend whose loggers are broker-spark relay nodes.

Put together the way docs/how-to/zeek-cluster-zeromq.md tells a site to: its cluster layout
(``<!-- live: zeromq-layout -->``) names the relay nodes as the cluster's loggers, and
each relay runs its command (``<!-- live: relay-node -->``), moved onto loopback. The
rest of what a site's zeekctl or management framework gives every Zeek process is
what zeekctl writes into ``zeekctl-config.zeek`` for the ZeroMQ backend: the proxy's
endpoints on the manager and the cluster's CURVE keys (ZeroMQ/plugins/
cluster_backend_zeromq.py in zeek/zeekctl). The relays read the same keys from Zeek's
``ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_*`` variables, as the doc's systemd unit gives them.

Each Zeek process loads ``scripts/live-cluster.zeek`` beside this module: a worker ends
once its trace is read, and the manager publishes and prints the events the tests send
and look for.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from doc_snippets import command_args, layout_nodes, relocate_layout, snippet
from ports import free_port
from test_cli_support import Command
from zeek_procs import SCRIPTS, ZeekProcess


@dataclass(frozen=True)
class CurveKeys:
    """The cluster's two CURVE key pairs (Z85), as zeekctl makes them."""

    server_public: str
    server_secret: str
    client_public: str
    client_secret: str

    @classmethod
    def new(cls) -> CurveKeys:
        server, client = zmq.curve_keypair(), zmq.curve_keypair()
        return cls(*(k.decode() for k in (*server, *client)))

    def environment(self) -> dict[str, str]:
        """Zeek's environment variables for the keys (what a relay's unit reads)."""
        prefix = "ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_"
        return {
            f"{prefix}SERVER_PUBLICKEY": self.server_public,
            f"{prefix}SERVER_SECRETKEY": self.server_secret,
            f"{prefix}CLIENT_PUBLICKEY": self.client_public,
            f"{prefix}CLIENT_SECRETKEY": self.client_secret,
        }

    def redefs(self) -> str:
        """The keys as zeekctl writes them into zeekctl-config.zeek."""
        names = {
            "server_publickey": self.server_public,
            "server_secretkey": self.server_secret,
            "client_publickey": self.client_public,
            "client_secretkey": self.client_secret,
        }
        return "".join(
            f'redef Cluster::Backend::ZeroMQ::curve_{name} = "{value}";\n'
            for name, value in names.items()
        )


def zeekctl_config(xpub: int, xsub: int, keys: CurveKeys) -> str:
    """What zeekctl's ZeroMQ plugin writes for every node: the backend, the proxy on the
    manager (its XPUB at ``xpub``, its XSUB at ``xsub``) and the CURVE keys."""
    return (
        "@load policy/frameworks/cluster/backend/zeromq\n"
        f'redef Cluster::Backend::ZeroMQ::listen_xpub_endpoint = "tcp://127.0.0.1:{xpub}";\n'
        f'redef Cluster::Backend::ZeroMQ::listen_xsub_endpoint = "tcp://127.0.0.1:{xsub}";\n'
        f'redef Cluster::Backend::ZeroMQ::connect_xpub_endpoint = "tcp://127.0.0.1:{xsub}";\n'
        f'redef Cluster::Backend::ZeroMQ::connect_xsub_endpoint = "tcp://127.0.0.1:{xpub}";\n'
        + keys.redefs()
    )


def make_certs(folder: Path, *names: str) -> Path:
    """``broker-spark certs``: a CA and a certificate per name, in ``folder``."""
    done = subprocess.run(
        [sys.executable, "-m", "broker_spark", "certs", "--out", str(folder), "--nodes", *names],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return folder


@dataclass
class RelayNode:
    """One ``broker-spark node`` of docs/how-to/zeek-cluster-zeromq.md's relay command, on loopback."""

    name: str
    args: list[str]
    folder: Path
    env: Mapping[str, str]
    cmd: Command | None = None

    @property
    def relay(self) -> str:
        return self.args[self.args.index("--relay") + 1]

    @property
    def pull(self) -> str:
        return self.args[self.args.index("--zeromq-logs") + 1]

    def start(self) -> RelayNode:
        self.cmd = Command(*self.args, tmp=self.folder / "logs", env=self.env)
        self.cmd.expect("^ready$", 60)
        return self

    def stop(self) -> None:
        """SIGTERM, as ``systemctl stop`` sends it; the node must end cleanly."""
        assert self.cmd is not None
        code = self.cmd.signal()
        assert code == 0, f"{self.name} exited {code}: {self.cmd.stderr()[-2000:]}"
        self.cmd.close()
        self.cmd = None

    def close(self) -> None:
        if self.cmd is not None:
            self.cmd.close()
            self.cmd = None


def relay_nodes(
    folder: Path, certs: Path, keys: CurveKeys, names: Sequence[str], proxy: str | None
) -> list[RelayNode]:
    """The relay nodes of docs/how-to/zeek-cluster-zeromq.md's command, one per name; the first joins the
    cluster's proxy (``proxy``: its XPUB and XSUB, as ``--zeromq-proxy`` takes them) for
    events, as the doc says one relay should."""
    text = snippet("how-to/zeek-cluster-zeromq.md", "relay-node")
    nodes = []
    for i, name in enumerate(names):
        values = {
            "--spool": str(folder / name / "spool"),
            "--zeromq-logs": f"tcp://127.0.0.1:{free_port()}",
            "--relay": f"127.0.0.1:{free_port()}",
            "--metrics": f"127.0.0.1:{free_port()}",
            "--cert": str(certs / f"{name}.pem"),
            "--key": str(certs / f"{name}.key"),
            "--ca": str(certs / "ca.pem"),
        }
        if proxy is not None:
            values["--zeromq-proxy"] = proxy
        args = command_args(text, values)
        if i > 0 or proxy is None:  # the doc's other relays keep logs only
            at = args.index("--zeromq-proxy")
            del args[at : at + 2]
        nodes.append(RelayNode(name, args, folder / name, keys.environment()))
    return nodes


def deploy_layout(loggers: Mapping[str, int]) -> str:
    """docs/how-to/zeek-cluster-zeromq.md's cluster layout, its loggers on the given loopback ports."""
    return relocate_layout(snippet("how-to/zeek-cluster-zeromq.md", "zeromq-layout"), loggers)


@dataclass
class ZeekCluster:
    """Zeek's manager, proxies and workers of a cluster ``layout`` (a cluster-layout.zeek),
    each Zeek loading ``scripts`` (beside the live tests' own) as a site's local.zeek."""

    zeek: Path
    folder: Path
    layout: str
    keys: CurveKeys
    scripts: Sequence[Path] = ()
    xpub: int = field(default_factory=free_port)
    xsub: int = field(default_factory=free_port)
    websocket: int = 0  # where the manager serves Zeek's WebSocket API (0: it does not)
    running: dict[str, ZeekProcess] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.nodes = layout_nodes(self.layout)
        (self.folder / "cluster-layout.zeek").write_text(self.layout)
        (self.folder / "zeekctl-config.zeek").write_text(
            zeekctl_config(self.xpub, self.xsub, self.keys)
        )
        (self.folder / "live-settings.zeek").write_text(
            f"redef Live::websocket_port = {self.websocket}/tcp;\n"
        )

    @property
    def proxy(self) -> str:
        """Where the proxy's XPUB and XSUB are, as ``--zeromq-proxy`` and Spark take them."""
        return f"tcp://127.0.0.1:{self.xpub},tcp://127.0.0.1:{self.xsub}"

    def workers(self) -> list[str]:
        return sorted(n for n, t in self.nodes.items() if t == "WORKER")

    def start(self, node: str, *args: str) -> ZeekProcess:
        scripts = [*map(str, self.scripts), str(SCRIPTS / "live-cluster.zeek")]
        proc = ZeekProcess(
            self.zeek, node, [*args, *scripts], self.folder, env={"CLUSTER_NODE": node}
        )
        self.running[node] = proc
        return proc

    def start_control(self) -> None:
        """The manager (it runs the proxy and the WebSocket API) and the proxies."""
        self.start("manager").wait_line("^live manager up", 120)
        for node, kind in sorted(self.nodes.items()):
            if kind == "PROXY":
                self.start(node)

    def read(self, traces: Sequence[Path], deterministic: bool = True) -> None:
        """Each worker reads one trace and ends; ``deterministic`` (``-D``): with the uids
        of a standalone ``-D`` run of the trace."""
        workers = self.workers()
        assert len(traces) == len(workers), (traces, workers)
        seeds = ["-D"] if deterministic else []
        procs = [
            self.start(w, *seeds, "-C", "-r", str(t)) for w, t in zip(workers, traces, strict=True)
        ]
        for proc in procs:
            proc.finished(180)
            self.running.pop(proc.name, None)

    def close(self) -> None:
        for proc in reversed(list(self.running.values())):
            with contextlib.suppress(Exception):
                proc.stop()
        self.running.clear()


@dataclass
class Site:
    """docs/how-to/zeek-cluster-zeromq.md's site: the Zeek cluster, its relay nodes, the TLS files (``reader``
    is the Spark side's certificate) and the cluster's CURVE keys."""

    cluster: ZeekCluster
    relays: list[RelayNode]
    certs: Path
    folder: Path
    keys: CurveKeys

    def curve_options(self) -> dict[str, str]:
        """The keys as Spark's ``zeromq.curve*`` options (a client of the cluster's proxy)."""
        return {
            "zeromq.curveServerPublicKey": self.keys.server_public,
            "zeromq.curveClientPublicKey": self.keys.client_public,
            "zeromq.curveClientSecretKey": self.keys.client_secret,
        }

    def reader_tls(self) -> dict[str, str]:
        """The ``ssl.*`` options of a Spark reader of the relays (mutual TLS)."""
        return {
            "ssl.certificate": str(self.certs / "reader.pem"),
            "ssl.key": str(self.certs / "reader.key"),
            "ssl.cafile": str(self.certs / "ca.pem"),
        }
