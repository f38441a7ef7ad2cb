"""This package's version and Broker's ``Version`` namespace (the Broker release we follow).

They live here, not in ``broker_spark/__init__.py``, so modules inside the
package can use them without importing the package root (which pulls in the
whole facade): the root re-exports both, modules import them from here.
"""

from __future__ import annotations

__all__ = ["Version", "__version__"]

__version__ = "0.1.0"


class Version:
    """Broker's ``Version`` namespace: the Broker release whose API we follow."""

    MAJOR = 2
    MINOR = 8
    PATCH = 0
    PROTOCOL = 1

    @staticmethod
    def string() -> str:
        return f"{Version.MAJOR}.{Version.MINOR}.{Version.PATCH}"

    @staticmethod
    def compatible(protocol: int) -> bool:
        return protocol == Version.PROTOCOL
