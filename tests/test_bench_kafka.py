"""``bench/kafka_path.py --quick``: both paths end to end (a relay node and a real Kafka broker
into tables), so that the bench behind docs/performance.md's Kafka figures keeps working.

Slow (a Spark driver, Kafka's JVM, 10,000 records each way several times): ``make test-slow``,
which CI runs after ``.ci/kafka-jars`` has cached the jars. It checks what the bench reports
holds together and that nothing is left running, not the figures (the machine is shared).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _marked(mark: bytes) -> list[str]:
    """The command lines of processes whose environment holds ``mark`` (the bench's children
    inherit it: its Kafka JVM, relay nodes, Spark's JVM and workers, its producers)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if mark in Path(f"/proc/{name}/environ").read_bytes():
                    out.append(Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace"))
            except OSError:
                continue
    return out


@pytest.mark.timeout(600)
def test_quick_run_measures_both_paths_and_leaves_nothing_behind() -> None:
    pytest.importorskip("confluent_kafka", reason="make bench-kafka installs the kafka extra")
    mark = f"BENCH_KAFKA_TEST={uuid.uuid4().hex}"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "kafka_path.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=560,
        env={**os.environ, mark.split("=")[0]: mark.split("=")[1]},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for path in ("ours", "kafka"):
        for run in ("unpaced", "paced", "crash"):
            r = result[path][run]
            assert r["records_sent"] + r["dropped_by_producer"] == 10_000, (path, run, r)
            assert r["records_per_s"] > 0
            assert r["cpu_us_per_record"].get("collector", 0) > 0, (path, run)
            assert r["collector_bytes_per_record"] > 0
        for run in ("unpaced", "paced"):  # no crash: every record once in its table
            r = result[path][run]
            assert r["lost"] == 0 and r["doubled"] == 0, (path, run, r)
            assert r["tables"]["conn"]["rows"] == 5000
        assert 0 < result[path]["paced"]["latency"]["p50_ms"] < 60_000
    assert result["kafka"]["zstd_bytes_per_record"] > 0
    assert result["ours_vs_kafka_records_per_s"] > 0
    time.sleep(1)  # a JVM's last exit after its parent's
    assert not _marked(mark.encode()), "the bench left processes running"
