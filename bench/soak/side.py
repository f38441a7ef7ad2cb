"""The soak's side traffic: a WebSocket client and a store writer, against one relay node.

``python bench/soak/side.py WS_URL PEER REPORT``

* A client of Zeek's WebSocket API at WS_URL publishes a count on
  ``zeek/soak/ws/ping`` ten times a second (reconnecting when its connection
  drops, as a Zeek WebSocket client would), and counts what it sent.
* A Broker endpoint peered with PEER subscribes to ``zeek/soak/ws/`` (the node
  forwards the WebSocket client's messages to it) and writes a clone of the
  node's store ``soak``: ``k0`` .. ``k99`` take ever larger values.

On SIGTERM it stops sending, waits for what is in flight, reads the store back
through a fresh clone and writes REPORT (JSON): messages sent and received,
reconnections, the keys written and the keys that read back differently.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

KEYS = 100


def _websocket(url: str, stop: threading.Event, out: dict[str, Any]) -> None:
    from websockets.sync.client import connect

    n = 0
    while not stop.is_set():
        try:
            with connect(url, open_timeout=5) as ws:
                ws.send(json.dumps([]))  # publish only
                json.loads(ws.recv(timeout=5))  # the ack
                while not stop.wait(0.1):
                    message = {
                        "type": "data-message",
                        "topic": "zeek/soak/ws/ping",
                        "@data-type": "count",
                        "data": n,
                    }
                    ws.send(json.dumps(message))
                    n += 1
                    out["ws_sent"] = n
        except Exception as exc:  # the connection dropped: count it, reconnect
            out["ws_reconnects"] = out.get("ws_reconnects", 0) + 1
            out["ws_last_error"] = repr(exc)
            stop.wait(1.0)


def main() -> int:
    import broker_spark as broker

    url, peer, report = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    host, _, port = peer.rpartition(":")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out: dict[str, Any] = {"ws_sent": 0, "ws_received": 0, "ws_reconnects": 0, "puts": 0}
    config = broker.Configuration(broker.BrokerOptions(disable_ssl=True))
    with broker.Endpoint(config) as ep:
        sub = ep.make_subscriber("zeek/soak/ws/")
        assert ep.peer(host, int(port), retry=1.0)
        clone = ep.attach_clone("soak")
        written: dict[str, int] = {}
        ws = threading.Thread(target=_websocket, args=(url, stop, out), daemon=True)
        ws.start()
        i = 0
        while not stop.wait(0.1):
            key = f"k{i % KEYS}"
            clone.put(key, i)
            written[key] = i
            i += 1
            out["puts"] = i
            out["ws_received"] += len(sub.poll())
        ws.join(10)
        wrong: dict[str, int] = {}
        time.sleep(2.0)  # what is in flight arrives
        out["ws_received"] += len(sub.poll())
        clone.await_idle(10)
        # A second endpoint's fresh clone reads what the master holds.
        with broker.Endpoint(config) as reader:
            assert reader.peer(host, int(port), retry=1.0)
            check = reader.attach_clone("soak")
            check.await_idle(10)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                wrong = {k: v for k, v in written.items() if check.get(k) != v}
                if not wrong:
                    break
                time.sleep(0.5)
        out["keys_written"] = len(written)
        out["keys_wrong"] = len(wrong)
    report.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
