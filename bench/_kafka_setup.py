"""Kafka for bench/kafka_path.py: its jars fetched with ``mvn`` and cached, a broker run with ``java``.

Usage: ``python bench/_kafka_setup.py fetch`` (what ``.ci/kafka-jars`` and ``make bench-kafka``
run first): fetches, once, into ``~/.cache/broker-spark/kafka/`` (``$XDG_CACHE_HOME`` if set;
never into the checkout):

- **Kafka's broker**, ``org.apache.kafka:kafka_2.13`` :data:`KAFKA_VERSION` and its runtime
  jars (``bench/kafka/broker-pom.xml``);
- **Spark's Kafka source**, ``spark-sql-kafka-0-10_2.13`` for the installed PySpark, with the
  Kafka client and commons-pool2 it needs beside PySpark's own jars
  (``bench/kafka/spark-pom.xml``). Maven Central may not have the installed PySpark's release
  yet (4.3.0 when this was written): then the newest earlier minor release of the same major
  is used, and said.

:class:`KafkaBroker` runs one broker in KRaft mode (broker and controller in one JVM,
replication 1), as ``kafka-storage.sh format`` and ``kafka-server-start.sh`` would: the storage
formatted, then ``kafka.Kafka`` started with the script's heap and GC flags. The JVM dies with
the bench whatever way it ends (a ``finally``, Ctrl-C, and ``PR_SET_PDEATHSIG`` should the
bench itself be killed), and its folder is removed.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _collector_process import CollectorProcess, die_with_parent, free_port, on_disk

HERE = Path(__file__).resolve().parent
#: Kafka's broker release run here: a 4.x, as the issue asks (Java 17, KRaft only).
KAFKA_VERSION = "4.1.1"
#: The jars Spark's Kafka source needs that PySpark does not ship.
SPARK_JARS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)
#: kafka-server-start.sh's JVM flags (KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS defaults).
BROKER_JVM = (
    "-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)  # fmt: skip


class SetupError(SystemExit):
    """What stops the bench before it starts: no ``mvn``, no ``java``, no Maven Central."""


def cache_root() -> Path:
    """Where the jars are kept: outside the checkout, shared by every clone on the machine."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "broker-spark" / "kafka"


def _pyspark_version() -> str:
    import pyspark

    return pyspark.__version__.split("+")[0]


def _candidates(version: str) -> list[str]:
    """Spark Kafka source releases to try: the installed PySpark's, then each earlier minor's
    first release of the same major (a connector's API is stable within a major)."""
    major, minor = (int(p) for p in version.split(".")[:2])
    out = [version] + [f"{major}.{m}.0" for m in range(minor, -1, -1)]
    return list(dict.fromkeys(out))


def _mvn_copy(pom: str, prop: str, version: str, into: Path, include: str = "") -> str:
    """``mvn dependency:copy-dependencies`` of one of bench/kafka's poms into ``into``;
    '' when done, else mvn's error lines."""
    if shutil.which("mvn") is None:
        raise SetupError("bench-kafka: mvn is not installed (apt-get install maven)")
    command = [
        "mvn", "-q", "-B", "-f", str(HERE / "kafka" / pom), f"-D{prop}={version}",
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={into}",
    ]  # fmt: skip
    if include:
        command.append(f"-DincludeArtifactIds={include}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode == 0:
        return ""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    return "\n".join(line for line in plain.splitlines() if "ERROR" in line) or plain[-500:]


def _unreachable(errors: str) -> bool:
    """Whether mvn's errors say the repository was out of reach (not that it lacks a version):
    a host unknown, a connection refused or timed out, or not even its own plugin fetched."""
    return bool(
        re.search(
            r"Unknown host|Could not transfer|Connect|timed out|Network|No plugin found", errors
        )
    )


def _stop_unreachable(errors: str) -> None:
    raise SetupError(
        "bench-kafka: Maven Central (or the mirror mvn is set up with) cannot be reached, so "
        "Kafka's broker and Spark's Kafka source cannot be fetched; mvn said: "
        + errors.splitlines()[0][:300]
    )


def _fetch_into(final: Path, pom: str, prop: str, versions: list[str], include: str = "") -> str:
    """Fetch into a temporary folder beside ``final`` and rename it (a fetch cut short leaves
    no half cache); the version fetched."""
    final.parent.mkdir(parents=True, exist_ok=True)
    errors = ""
    for version in versions:
        partial = Path(tempfile.mkdtemp(prefix=final.name + ".", dir=final.parent))
        errors = _mvn_copy(pom, prop, version, partial, include)
        if not errors:
            (partial / "VERSION").write_text(version + "\n")
            os.replace(partial, final) if not final.exists() else shutil.rmtree(partial)
            return version
        shutil.rmtree(partial, ignore_errors=True)
        if _unreachable(errors) and "Could not find artifact" not in errors:
            _stop_unreachable(errors)
    if _unreachable(errors):
        _stop_unreachable(errors)
    raise SetupError(f"bench-kafka: mvn could not fetch {pom} ({errors.splitlines()[:1]})")


def broker_jars() -> Path:
    """The folder of Kafka's broker and its runtime jars, fetched the first time."""
    folder = cache_root() / f"broker-{KAFKA_VERSION}"
    if not (folder / "VERSION").exists():
        print(f"fetching Kafka {KAFKA_VERSION} with mvn into {folder}", file=sys.stderr)
        _fetch_into(folder, "broker-pom.xml", "kafka.version", [KAFKA_VERSION])
    return folder


def spark_kafka_jars() -> tuple[list[str], str]:
    """The jars of Spark's Kafka source for the installed PySpark, and their Spark version."""
    installed = _pyspark_version()
    folder = cache_root() / f"spark-for-{installed}"
    if not (folder / "VERSION").exists():
        print(
            f"fetching Spark's Kafka source for PySpark {installed} into {folder}", file=sys.stderr
        )
        _fetch_into(
            folder, "spark-pom.xml", "spark.version", _candidates(installed), ",".join(SPARK_JARS)
        )
    version = (folder / "VERSION").read_text().strip()
    return sorted(str(p) for p in folder.glob("*.jar")), version


def fetch() -> tuple[list[str], str]:
    """Both caches, filled if empty (the CI step and make's first step); the Spark Kafka
    source's jars and version, said when it is not the installed PySpark's."""
    if shutil.which("java") is None:
        raise SetupError("bench-kafka: java is not installed (Kafka 4 needs Java 17 or later)")
    broker_jars()
    jars, version = spark_kafka_jars()
    if version != _pyspark_version():
        print(
            f"Spark's Kafka source {version}: Maven Central has none for PySpark "
            f"{_pyspark_version()} yet",
            file=sys.stderr,
        )
    return jars, version


class KafkaBroker(CollectorProcess):
    """One Kafka broker (KRaft, broker and controller in one JVM) in a folder of its own, on
    loopback ports of its own; ``with`` stops it and removes the folder."""

    def __init__(self, extra: dict[str, str] | None = None) -> None:
        self.jars = broker_jars()
        super().__init__("bench-kafka-")
        self.data = self.folder / "data"
        self.port = free_port()
        self.controller = free_port()
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data),
            # one node: the internal topics' replication as config/server.properties sets it
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            **(extra or {}),
        }
        self.config = self.folder / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.log = self.folder / "broker.log"
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        done = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(self.config)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise RuntimeError(f"kafka storage format failed: {done.stderr[-500:]}")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str, jvm: tuple[str, ...] = ("-Xmx256m",)) -> list[str]:
        return ["java", *jvm, "-cp", str(self.jars / "*"), main, *args]

    def start(self, timeout: float = 60.0) -> None:
        """Start the JVM and wait until it takes connections."""
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self._java("kafka.Kafka", str(self.config), jvm=BROKER_JVM),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kafka exited ({self.process.returncode}); see {self.log}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"kafka did not listen on {self.port} in {timeout:.0f} s")

    def bytes_of(self, prefix: str) -> int:
        """Bytes on disk of the topics whose names start with ``prefix`` (every partition)."""
        return sum(on_disk(folder) for folder in self.data.glob(prefix + "*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["fetch"], help="fetch: fill the jar cache")
    parser.parse_args()
    fetch()
    print(f"kafka jars cached in {cache_root()}")


if __name__ == "__main__":
    main()
