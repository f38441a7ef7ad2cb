"""Which PySpark the ``broker`` data source needs, said plainly where an import would not.

The data source is built on PySpark's Python data source API
(``pyspark.sql.datasource``), which open-source Spark has from 4.0 on;
Databricks ships it from Runtime 17.3 LTS (Spark 4.0). On PySpark 3.5 or with
no PySpark at all, ``import pyspark.sql.datasource`` fails with a bare
``ModuleNotFoundError``; :func:`unsupported_pyspark` turns that into an error
that says what to install.
"""

from __future__ import annotations

from importlib import metadata

from broker_spark.errors import EC, BrokerError

__all__ = ["MIN_PYSPARK", "PySparkMissingError", "unsupported_pyspark"]

#: The first PySpark with the Python data source API (batch and streaming).
MIN_PYSPARK = "4.0"


class PySparkMissingError(BrokerError, ImportError):
    """No PySpark, or one without the Python data source API (3.5 and earlier)."""

    code = EC.Unspecified


def unsupported_pyspark() -> PySparkMissingError:
    """The error to raise when ``pyspark.sql.datasource`` cannot be imported."""
    try:
        found = f"PySpark {metadata.version('pyspark')} is installed"
    except metadata.PackageNotFoundError:
        found = "PySpark is not installed"
    return PySparkMissingError(
        f"the broker data source needs PySpark {MIN_PYSPARK} or later (its Python data "
        f"source API; Databricks Runtime 17.3 LTS or later), but {found}: "
        f"pip install 'broker-spark[spark]', or use the cluster's Spark 4"
    )
