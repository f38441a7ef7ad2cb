"""Spark beyond one process, on this machine: a standalone cluster and a Spark Connect server.

Both are started from the pyspark this interpreter imports (its ``spark-class``
and ``spark-submit``), bind loopback only, on free ports, and keep everything
they write in one temporary folder that :meth:`stop` removes, after ending
every process they started (each daemon leads a process group of its own, in
which its executors and their Python workers run too).

* :class:`StandaloneCluster`: one master and ``workers`` workers of ``cores``
  cores each. Each worker has its own work, local (block manager) and
  temporary folders, none of them the driver's, so an executor shares
  nothing with the driver but what Spark sends it: a task whose partition
  named a file on the driver's disk would only find it by accident of
  running on the same machine, and the reader's ``partitionData=auto`` must
  (and does) keep partitions inline there.
* :class:`ConnectServer`: ``SparkConnectServer`` in its own JVM with the given
  master; clients reach it at :attr:`ConnectServer.url` and run no JVM of
  their own, as on Databricks' serverless and shared clusters.

Used by ``tests/test_spark_cluster.py``, ``tests/test_spark_connect.py`` and
``bench/spark_cluster.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from ports import free_port  # noqa: F401 - where the tests have taken it from

ROOT = str(Path(__file__).resolve().parent.parent)

#: What the daemons' folder is called (``tests/conftest.py`` fails a run that leaves one).
PREFIX = "broker-spark-cluster-"


def spark_home() -> str:
    """The Spark distribution inside the pyspark package this interpreter imports."""
    from pyspark.find_spark_home import _find_spark_home

    return _find_spark_home()


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, with Spark's Python processes running this interpreter and
    finding the project (``pyspark_broker`` included) first."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, path) if p)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["SPARK_HOME"] = spark_home()
    env.update(extra or {})
    return env


class _Daemons:
    """Processes started in one temporary folder, each in a process group of its own."""

    def __init__(self, prefix: str) -> None:
        self.root = tempfile.mkdtemp(prefix=prefix)
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(os.path.join(self.root, f"{name}.log"), "wb")  # noqa: SIM115 (the child owns it)
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        self.procs.append((name, proc))
        return proc

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            with open(os.path.join(self.root, f"{name}.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the {name} process exited with {proc.returncode}:\n{self.log_tail(name)}"
                )

    def stop(self, grace: float = 20.0) -> None:
        """End every process group (the last started first), then remove the folder."""
        for _, proc in reversed(self.procs):
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for _, proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        for _, proc in self.procs:  # whatever is left of a group: its executors, its workers
            _signal_group(proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self.procs.clear()
        deadline = time.monotonic() + 10
        while os.path.exists(self.root) and time.monotonic() < deadline:
            shutil.rmtree(self.root, ignore_errors=True)
            if os.path.exists(self.root):  # a child still writing its last lines
                time.sleep(0.2)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # the group it leads (start_new_session), ours alone


def _wait(predicate: Any, timeout: float, what: str, daemons: _Daemons) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        daemons.check_alive()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


class _Service:
    """Daemons started together and stopped together (also as a context manager)."""

    _daemons: _Daemons | None = None

    def start(self, timeout: float = 120.0) -> Any:
        daemons = self._daemons = _Daemons(PREFIX)
        try:
            self._start(daemons, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, daemons: _Daemons, timeout: float) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        daemons, self._daemons = self._daemons, None
        if daemons is not None:
            daemons.stop()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StandaloneCluster(_Service):
    """A Spark standalone cluster on loopback, started from pyspark's ``spark-class``."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.master_url = ""
        self.web_url = ""
        self.worker_dirs: list[str] = []

    @property
    def total_cores(self) -> int:
        return self.workers * self.cores

    def _start(self, daemons: _Daemons, timeout: float) -> None:
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        port, ui = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        self.web_url = f"http://127.0.0.1:{ui}"
        tmp = os.path.join(daemons.root, "master-tmp")
        os.makedirs(tmp)
        daemons.spawn(
            "master",
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
            ],
            self._env(tmp, "-Xmx256m"),
        )
        _wait(lambda: self.state().get("status") == "ALIVE", timeout, "the master", daemons)
        for i in range(self.workers):
            folder = os.path.join(daemons.root, f"worker-{i}")
            work, local, tmp = (os.path.join(folder, n) for n in ("work", "local", "tmp"))
            for path in (work, local, tmp):
                os.makedirs(path)
            self.worker_dirs.append(folder)
            env = self._env(tmp, "-Xmx256m")
            env.update(SPARK_LOCAL_DIRS=local, SPARK_WORKER_DIR=work)
            daemons.spawn(
                f"worker-{i}",
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    *("--host", "127.0.0.1", "--port", "0", "--webui-port", "0"),
                    *("--cores", str(self.cores), "--memory", self.memory),
                    *("--work-dir", work, self.master_url),
                ],
                env,
            )
        _wait(
            lambda: self.state().get("aliveworkers") == self.workers,
            timeout,
            f"{self.workers} workers",
            daemons,
        )

    def _env(self, tmp: str, heap: str) -> dict[str, str]:
        return python_env(
            {
                "TMPDIR": tmp,
                "SPARK_DAEMON_JAVA_OPTS": f"-Djava.io.tmpdir={tmp} -XX:-UsePerfData",
                "SPARK_DAEMON_MEMORY": heap.removeprefix("-Xmx"),
                "SPARK_NO_DAEMONIZE": "1",
            }
        )

    def state(self) -> dict[str, Any]:
        """The master's view (its web UI's JSON), ``{}`` while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=2) as reply:
                return json.load(reply)
        except (OSError, ValueError):
            return {}

    def session_config(self, cores: int | None = None) -> dict[str, str]:
        """What a driver needs to run on this cluster with ``cores`` of its cores (all)."""
        return {
            "spark.master": self.master_url,
            "spark.cores.max": str(cores or self.total_cores),
            "spark.executor.cores": str(self.cores),
            "spark.executor.memory": "768m",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": ROOT,
            # the executor's own work folder (its working directory), not the machine's /tmp
            "spark.executor.extraJavaOptions": "-Djava.io.tmpdir=. -XX:-UsePerfData",
        }

    def wait_for_executors(self, spark: Any, count: int, timeout: float = 90.0) -> None:
        """Until ``count`` executors registered with ``spark``'s driver."""

        def registered() -> bool:
            status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
            return status.size() - 1 >= count  # the driver is in it too

        assert self._daemons is not None
        _wait(registered, timeout, f"{count} executors", self._daemons)


class ConnectServer(_Service):
    """``SparkConnectServer`` in a JVM of its own (``spark-submit``), on a loopback port."""

    def __init__(self, master: str = "local[2]", conf: dict[str, str] | None = None) -> None:
        self.master = master
        self.conf = dict(conf or {})
        self.port = 0

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def _start(self, daemons: _Daemons, timeout: float) -> None:
        self.port = free_port()
        tmp = os.path.join(daemons.root, "tmp")
        os.makedirs(tmp)
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.stopTimeout": "10s",
            "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={tmp} -XX:-UsePerfData",
            "spark.local.dir": tmp,
            **self.conf,
        }
        argv = [
            os.path.join(spark_home(), "bin", "spark-submit"),
            *("--class", "org.apache.spark.sql.connect.service.SparkConnectServer"),
            *("--name", "broker-spark-connect", "--master", self.master),
        ]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        daemons.spawn("connect", argv, python_env({"TMPDIR": tmp, "SPARK_CONNECT_MODE": "0"}))
        _wait(self._listening, timeout, "the Spark Connect server", daemons)

    def _listening(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", self.port)) == 0
