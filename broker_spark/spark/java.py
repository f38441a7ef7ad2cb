"""Is there a Java to run Spark on? Say so plainly before Spark says it obscurely.

PySpark starts a JVM through the ``java`` found via ``JAVA_HOME`` or ``PATH``;
without one, ``SparkSession.builder.getOrCreate()`` fails with "Java gateway
process exited before sending its port number", which sends people looking in
the wrong place. The tests' SparkSession fixture and the demo call
:func:`require_java` first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from broker_spark.errors import EC, BrokerError

__all__ = ["JavaMissingError", "MIN_JAVA", "find_java", "java_version", "require_java"]

#: Spark 4 runs on Java 17 and later.
MIN_JAVA = 17

_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


class JavaMissingError(BrokerError, RuntimeError):
    """No usable ``java`` for Spark (absent, not runnable, or too old)."""

    code = EC.Unspecified


def find_java() -> str | None:
    """The ``java`` Spark would run: ``$JAVA_HOME/bin/java`` if set, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def java_version(java: str) -> int | None:
    """The major version ``java -version`` reports (``1.8`` counts as 8), or None if unclear."""
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(done.stderr + done.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    return major


def require_java(minimum: int = MIN_JAVA) -> str:
    """Return the path of a usable ``java``, or raise :class:`JavaMissingError` saying what to do."""
    java = find_java()
    if java is None:
        where = (
            f"JAVA_HOME={os.environ['JAVA_HOME']!r} has no bin/java"
            if os.environ.get("JAVA_HOME")
            else "no java on PATH and JAVA_HOME is not set"
        )
        raise JavaMissingError(
            f"Spark needs Java {minimum} or later, but {where}; install a JDK "
            f"(e.g. apt-get install openjdk-{minimum}-jre-headless) or set JAVA_HOME"
        )
    version = java_version(java)
    if version is None:
        raise JavaMissingError(f"{java} -version did not run or did not report a version")
    if version < minimum:
        raise JavaMissingError(
            f"Spark needs Java {minimum} or later, but {java} is Java {version}; "
            "install a newer JDK or point JAVA_HOME at one"
        )
    return java
