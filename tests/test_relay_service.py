"""The relay's shipped files run as the ZeroMQ guide installs them.

The guide's block ``relay-service-files`` (docs/how-to/zeek-cluster-zeromq.md, "4. As a
service") runs as written in a scratch root: it adds the service's system user, installs
``conf/relay-service.toml``, the relay's certificate and key, and ``relay.env`` made from
zeekctl's CURVE key files, with the guide's owners and modes. Then the unit's
``ExecStartPre`` and ``ExecStart`` run as that user, with the unit's ``EnvironmentFile``,
``WorkingDirectory`` and ``UMask`` (what systemd would do; no systemd needed). A ZeroMQ
client with the cluster's keys pushes a real Zeek's batches in; a reader with the reader's
certificate reads them all back, one without a certificate is refused.

What a one-machine test must change, and nothing else: the ports (free ones), the
example hosts (loopback), the absolute paths (under the scratch root: doc_blocks.Loopback),
``/opt/broker-spark`` (a venv in the scratch root whose site-packages
are this checkout's, for pip's install from PyPI) and the user's name (a throwaway one, removed at the end,
as are its files). It needs root (useradd, chown); CI runs as root.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from doc_blocks import ROOT, Loopback, blocks
from spark_fixtures import wait_for
from test_relay_packaging import UNIT, unit_entries
from zeek_recordings import ZMQ_LOGS, zmq_messages

from broker_spark.cli import main
from broker_spark.config import TLSSettings
from broker_spark.spool.relay_client import SpoolClient, SpoolClientError
from broker_spark.tls import make_contexts
from broker_spark.zeromq.curve import CurveKeys, generate_keypair

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="adds a system user: needs root"),
]

GUIDE = "how-to/zeek-cluster-zeromq.md"
SERVICE_NAME = "broker-spark"  # the unit's User= and Group=, and the guide's
_NAME = re.compile(rf"(?<![\w/.-]){SERVICE_NAME}(?![\w/.-])")
ANY = "@any-address@"  # 0.0.0.0 kept through Loopback, which moves it to loopback
OPT = "/opt/broker-spark/"  # the unit's venv (the guide: python3 -m venv, pip install)


def _guide_block(name: str) -> str:
    found = [b.text for b in blocks(GUIDE) if b.marks.get("live") == name]
    assert len(found) == 1, f"{GUIDE}: one block {name!r}, found {len(found)}"
    return found[0]


def _service() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, value in unit_entries(UNIT.read_text())["Service"]:
        out.setdefault(key, []).append(value)
    return out


def _environment_file(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile: NAME=VALUE lines, comments and blank lines skipped."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")):
            name, sep, value = line.partition("=")
            assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", name), f"not NAME=VALUE: {line!r}"
            env[name] = value
    return env


@pytest.fixture
def scratch() -> Iterator[tuple[Path, str]]:
    """A scratch root other users may traverse, and a user name nobody has; both gone after."""
    # in /tmp, not under the tests' TMPDIR (0700): the service's user must traverse it
    root = Path(tempfile.mkdtemp(prefix="broker-spark-service-", dir="/tmp"))
    root.chmod(0o755)
    user = f"bsrelay{secrets.token_hex(4)}"
    try:
        yield root, user
    finally:
        subprocess.run(["userdel", user], capture_output=True, check=False)
        subprocess.run(["groupdel", user], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _install(root: Path, user: str, loopback: Loopback) -> None:
    """Step 1's files in the working folder, then the guide's block as written."""
    work = root / "work"
    work.mkdir()
    (work / "conf").symlink_to(ROOT / "conf")
    assert main(["certs", "--out", str(work), "--nodes", "relay1", "reader"]) == 0
    curve = work / "curve"  # zeekctl's spool/zeromq/curve/, one key a file
    curve.mkdir()
    server, client = generate_keypair(), generate_keypair()
    for role, pair in (("server", server), ("client", client)):
        for kind in ("public", "secret"):
            (curve / f"{role}_{kind}key").write_text(pair[kind] + "\n")
    script = _NAME.sub(user, loopback.apply(_guide_block("relay-service-files")))
    done = subprocess.run(
        ["bash", "-e", "-c", script], cwd=work, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def _service_venv(home: Path, uid: int) -> None:
    """``/opt/broker-spark`` as the guide makes it, from a Python the service's user can run
    (this one may sit in root's home), with this checkout and its venv's packages."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    same = f"import sys; assert '%d.%d' % sys.version_info[:2] == '{version}'"
    bases = [os.path.realpath(sys._base_executable), f"/usr/bin/python{version}"]
    runs = [b for b in bases if b and _runs_as(uid, [b, "-c", same])]
    if not runs:
        pytest.skip(f"no Python {version} that a user other than root may run")
    subprocess.run([runs[0], "-m", "venv", "--without-pip", str(home)], check=True, timeout=60)
    site = home / "lib" / f"python{version}" / "site-packages"
    (site / "broker-spark.pth").write_text(f"{ROOT}\n{sysconfig.get_path('purelib')}\n")
    script = home / "bin" / "broker-spark"
    script.write_text(
        f"#!{home}/bin/python\nimport sys\nfrom broker_spark.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)


def _runs_as(uid: int, argv: list[str]) -> bool:
    try:
        done = subprocess.run(argv, user=uid, cwd="/", capture_output=True, check=False)
    except OSError:  # not even reachable
        return False
    return done.returncode == 0


def _started(root: Path, user: str, loopback: Loopback, shipped: str) -> subprocess.Popen:
    service = _service()
    assert service["User"] == service["Group"] == [SERVICE_NAME]
    etc = root / "etc" / SERVICE_NAME
    config = etc / "relay.toml"
    # free ports and the scratch paths; 0.0.0.0 stays, so the node's own check that a listener
    # other hosts reach authenticates its clients (mutual TLS, CURVE) runs. Owner, mode kept.
    config.write_text(loopback.apply(shipped.replace("0.0.0.0", ANY)).replace(ANY, "0.0.0.0"))
    account = pwd.getpwnam(user)
    if not (root / OPT.strip("/")).exists():
        _service_venv(root / OPT.strip("/"), account.pw_uid)
    state = Path(loopback.apply("/var/lib/" + service["StateDirectory"][0]))
    state.parent.mkdir(parents=True, exist_ok=True)  # what StateDirectory= makes, as User=
    state.mkdir(mode=int(service["StateDirectoryMode"][0], 8), exist_ok=True)
    os.chown(state, account.pw_uid, account.pw_gid)
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
    for setting in service["Environment"]:
        env.update(dict([setting.split("=", 1)]))
    for name in service["EnvironmentFile"]:  # "-": systemd goes on without the file
        path = Path(loopback.apply(name.lstrip("-")))
        if path.exists() or not name.startswith("-"):
            env.update(_environment_file(path))

    def command(key: str) -> list[str]:
        return shlex.split(loopback.apply(service[key][0]).replace(OPT, f"{root}{OPT}"))

    as_user = {
        "user": account.pw_uid,
        "group": account.pw_gid,
        "extra_groups": [],
        "umask": int(service["UMask"][0], 8),
        "cwd": loopback.apply(service["WorkingDirectory"][0]),
        "env": env,
    }
    check = subprocess.run(
        command("ExecStartPre"), capture_output=True, text=True, timeout=60, **as_user
    )
    assert check.returncode == 0, check.stderr
    node = subprocess.Popen(
        command("ExecStart"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        **as_user,
    )  # fmt: skip
    return node


class PortTaken(AssertionError):
    """A free port another process took before the node bound it."""


def _ready(node: subprocess.Popen) -> list[str]:
    """The node's output until its ``ready`` line, then the rest read on a thread (a full
    pipe would stop it); the list fills until the node exits."""
    said: list[str] = []
    assert node.stdout is not None
    for line in node.stdout:
        said.append(line)
        if line.strip() == "ready":
            break
    else:
        node.wait()
        kind = PortTaken if "address already in use" in "".join(said).lower() else AssertionError
        raise kind("the node ended before it was ready:\n" + "".join(said))
    threading.Thread(target=lambda: said.extend(node.stdout or ()), daemon=True).start()
    return said


def _push(endpoint: str, keys: CurveKeys) -> int:
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.linger = 10_000
    keys.configure_client(push)
    sent = 0
    try:
        push.connect(endpoint)
        for frames in zmq_messages(ZMQ_LOGS):
            push.send_multipart(frames)
            sent += 1
    finally:
        push.close()
        ctx.term()
    return sent


def _reader(port: int, tls: TLSSettings) -> SpoolClient:
    return SpoolClient.tcp("127.0.0.1", port, make_contexts(tls).client)


def test_the_unit_runs_the_guides_files_and_serves_only_the_readers_key(scratch) -> None:
    root, user = scratch
    loopback = Loopback(root)
    _install(root, user, loopback)
    etc = root / "etc" / SERVICE_NAME
    for name in ("relay.key", "relay.env"):  # secrets: root's, readable by the service's group
        info = (etc / name).stat()
        assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (
            0, pwd.getpwnam(user).pw_gid, 0o640,
        ), name  # fmt: skip
    shipped = (etc / "relay.toml").read_text()
    for attempt in range(5):  # free ports are free when chosen, not always when bound
        loopback.ports.clear()
        node = _started(root, user, loopback, shipped)
        try:
            said = _ready(node)
            break
        except PortTaken:
            if attempt == 4:
                raise
    try:
        env = _environment_file(etc / "relay.env")
        keys = CurveKeys.from_env(env)
        relay_port = int(loopback.ports["9998"])
        sent = _push(f"tcp://127.0.0.1:{loopback.ports['5557']}", keys)
        work = root / "work"
        reader = TLSSettings(
            certificate=str(work / "reader.pem"), key=str(work / "reader.key"),
            cafile=str(work / "ca.pem"),
        )  # fmt: skip

        def end() -> int:
            try:
                with _reader(relay_port, reader) as client:
                    return int(client.hello("follow", "reader")["end"]) >= sent
            except (SpoolClientError, OSError):
                return 0

        wait_for(end, 60, "the relay to keep every pushed batch")
        with _reader(relay_port, reader) as client:
            client.hello("follow", "reader")
            assert client.fetch_counted(0, sent, 30)[1] == sent
        with pytest.raises(SpoolClientError):
            anonymous = SpoolClient.tcp(
                "127.0.0.1", relay_port, make_contexts(TLSSettings()).client
            )
            anonymous.hello("follow", "anonymous")
        assert node.poll() is None
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
    assert node.returncode == 0, "".join(said)
    assert pwd.getpwnam(user).pw_dir == str(root / "var/lib" / SERVICE_NAME)
