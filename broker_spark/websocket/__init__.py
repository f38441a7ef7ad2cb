"""Zeek's WebSocket JSON API (v1): serving it and connecting to it.

- :mod:`~broker_spark.websocket.server`: ``Endpoint.web_socket_listen`` serves
  ``/v1/messages/json``; each client is a lightweight peer of the endpoint.
- :mod:`~broker_spark.websocket.bridge`: ``Endpoint.web_socket_peer`` bridges
  the endpoint to a remote WebSocket API (a Zeek manager, another Broker).
- :mod:`~broker_spark.websocket.ws_link`: the connection as a neighbour of the core.
- :mod:`~broker_spark.websocket.json_messages`: acks, errors and replies as JSON text.
- :mod:`~broker_spark.websocket.manager`: one endpoint's servers, bridges and TLS.

The protocol itself (HTTP upgrade, frames, pings, TLS) is the ``websockets``
library's, run on the endpoint's own event loop.
"""

from __future__ import annotations

from broker_spark.websocket.json_messages import JSON_PATH

__all__ = ["JSON_PATH"]
