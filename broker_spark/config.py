"""Endpoint configuration: Broker's ``BrokerOptions`` and ``Configuration``, and TLS settings.

Code written for Broker's Python bindings builds ``Configuration(BrokerOptions())``,
flips a few options and passes the result to ``Endpoint``. We accept the same
objects with the same attribute names and defaults, plus a handful of
extensions for the knobs Broker hides (buffer sizes and the overflow policy of
subscribers), each documented below. Options are validated once, when an
endpoint is built from them, so a typo fails loudly instead of being ignored.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from broker_spark.protocol.address_slots import DEFAULT_PER_ADDRESS

__all__ = [
    "DEFAULT_TTL",
    "OVERFLOW_POLICIES",
    "PEER_OVERFLOW_POLICIES",
    "Backend",
    "BrokerOptions",
    "Configuration",
    "TLSSettings",
    "check_overflow_policy",
]

#: Hops a message may travel; Broker's default.
DEFAULT_TTL = 16

#: What a full subscriber queue does with the next message.
#: ``block`` stalls the flow (publishers see zero demand), ``drop_oldest`` and
#: ``drop_newest`` keep the flow going and count what they dropped.
OVERFLOW_POLICIES = ("block", "drop_oldest", "drop_newest")

#: Broker's policies for a peer whose send buffer is full.
PEER_OVERFLOW_POLICIES = ("disconnect", "drop_newest", "drop_oldest")


class Backend(enum.IntEnum):
    """Storage backends of data stores (``broker.Backend``)."""

    Memory = 0
    SQLite = 1


#: Bytes a ``block`` subscriber queue may hold beyond its ``qsize`` floor (4 MiB); see
#: :mod:`broker_spark.core.queues`.
DEFAULT_QUEUE_BYTES = 4 << 20


def check_overflow_policy(policy: str) -> str:
    """Return ``policy`` if it names a subscriber overflow policy, else raise ValueError."""
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow policy must be one of {OVERFLOW_POLICIES}, got {policy!r}")
    return policy


class BrokerOptions:
    """Broker's ``broker_options``: the switches of one endpoint.

    Broker's own fields: ``disable_ssl``, ``disable_forwarding``, ``ttl``,
    ``ignore_broker_conf``, ``use_real_time``, ``peer_buffer_size`` and
    ``peer_overflow_policy``; ``forward`` is the older, inverted name of
    ``disable_forwarding``.

    Extensions (not in Broker, with defaults that keep Broker's behaviour):

    - ``subscriber_queue_size`` (20): default ``qsize`` of subscribers. With the
      ``block`` policy it is a floor: a queue takes messages beyond it while
      they cost less than ``subscriber_queue_bytes``.
    - ``subscriber_queue_bytes`` (4 MiB): what a ``block`` subscriber's queue
      may hold beyond its ``qsize`` (payloads plus 160 bytes a message), so a
      slow subscriber pins at most that; 0 makes ``qsize`` a hard ceiling.
    - ``subscriber_overflow_policy`` (``"block"``): default overflow policy of
      subscribers, one of :data:`OVERFLOW_POLICIES`.
    - ``publisher_buffer_size`` (1024): messages a publisher (and
      ``Endpoint.publish``) may queue before publishing blocks.
    - ``status_queue_size`` (1024): statuses kept per status subscriber; the
      oldest are dropped beyond that, so a status subscriber never stalls anything.
    - ``connections_per_address`` (64): connections one address may hold at once on
      each of the endpoint's listeners (peering, WebSocket), so one host cannot take
      every slot (``protocol/address_slots.py``).
    """

    def __init__(self, **kwargs: Any) -> None:
        self.disable_ssl = False
        self.disable_forwarding = False
        self.ttl = DEFAULT_TTL
        self.ignore_broker_conf = False
        self.use_real_time = True
        self.peer_buffer_size = 2048
        self.peer_overflow_policy = "disconnect"
        self.subscriber_queue_size = 20
        self.subscriber_queue_bytes = DEFAULT_QUEUE_BYTES
        self.subscriber_overflow_policy = "block"
        self.publisher_buffer_size = 1024
        self.status_queue_size = 1024
        self.connections_per_address = DEFAULT_PER_ADDRESS
        for name, value in kwargs.items():
            if name != "forward" and not hasattr(self, name):
                raise TypeError(f"unknown broker option {name!r}")
            setattr(self, name, value)

    @property
    def forward(self) -> bool:
        """True unless forwarding is disabled (the older name of the option)."""
        return not self.disable_forwarding

    @forward.setter
    def forward(self, value: bool) -> None:
        self.disable_forwarding = not value

    def validate(self) -> None:
        """Raise ValueError naming the first option with an impossible value."""
        if type(self.ttl) is not int or not 1 <= self.ttl <= 0xFFFF:
            raise ValueError(f"ttl must be an integer in [1, 65535], got {self.ttl!r}")
        for name in (
            "peer_buffer_size",
            "subscriber_queue_size",
            "publisher_buffer_size",
            "status_queue_size",
            "connections_per_address",
        ):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        qbytes = self.subscriber_queue_bytes
        if type(qbytes) is not int or qbytes < 0:
            raise ValueError(
                f"subscriber_queue_bytes must be a non-negative integer, got {qbytes!r}"
            )
        if self.peer_overflow_policy not in PEER_OVERFLOW_POLICIES:
            raise ValueError(
                f"peer_overflow_policy must be one of {PEER_OVERFLOW_POLICIES}, "
                f"got {self.peer_overflow_policy!r}"
            )
        if self.subscriber_overflow_policy not in OVERFLOW_POLICIES:
            raise ValueError(
                f"subscriber_overflow_policy must be one of {OVERFLOW_POLICIES}, "
                f"got {self.subscriber_overflow_policy!r}"
            )

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"BrokerOptions({fields})"


class Configuration:
    """Broker's Python ``Configuration``: options plus the TLS settings.

    With none of the ``openssl_*`` attributes set, TLS is anonymous (encrypted,
    not authenticated); with any of them set, both sides must present
    certificates that verify against the CA (see :attr:`authenticated`).
    """

    def __init__(self, options: BrokerOptions | None = None) -> None:
        # A copy, so changing the caller's options later does not reach a running endpoint.
        self.options = copy.copy(options) if options is not None else BrokerOptions()
        self.openssl_cafile = ""
        self.openssl_capath = ""
        self.openssl_certificate = ""
        self.openssl_key = ""
        self.openssl_passphrase = ""
        self.max_threads = 0

    @property
    def authenticated(self) -> bool:
        """True when any certificate option is set, which asks for mutual TLS."""
        return TLSSettings.of(self).authenticated

    def __repr__(self) -> str:
        return f"Configuration({self.options!r}, authenticated={self.authenticated})"


#: The names of TLSSettings' certificate fields, in the order Broker lists them.
TLS_FILES = ("certificate", "key", "cafile", "capath")


@dataclass(frozen=True)
class TLSSettings:
    """Broker's TLS options, the one type every way of giving them becomes.

    An endpoint's :class:`Configuration` holds them as Broker's ``openssl_*``
    attributes and ``options.disable_ssl`` (:meth:`of`, :meth:`apply`); the
    command's flags and ``[tls]`` section, the Spark options ``ssl.*``
    (:meth:`spark_options`), the demo and the relay's clients all make one of
    these. With no file set, TLS is anonymous (encrypted, not authenticated, as
    Broker's default); with any, both sides present certificates that verify
    against the CA (mutual TLS). The passphrase never shows in a repr.
    """

    disable_ssl: bool = False
    certificate: str = ""
    key: str = ""
    cafile: str = ""
    capath: str = ""
    passphrase: str = field(default="", repr=False)

    @property
    def authenticated(self) -> bool:
        """True when any certificate option is set: mutual TLS is required."""
        return any((self.certificate, self.key, self.cafile, self.capath, self.passphrase))

    @classmethod
    def of(cls, config: Configuration, disable_ssl: bool | None = None) -> TLSSettings:
        """The TLS settings of an endpoint ``Configuration`` (``disable_ssl`` overrides its
        own)."""
        return cls(
            disable_ssl=bool(config.options.disable_ssl if disable_ssl is None else disable_ssl),
            certificate=config.openssl_certificate,
            key=config.openssl_key,
            cafile=config.openssl_cafile,
            capath=config.openssl_capath,
            passphrase=config.openssl_passphrase,
        )

    def apply(self, config: Configuration) -> Configuration:
        """Copy these settings into ``config`` (returned, for chaining)."""
        config.options.disable_ssl = self.disable_ssl
        config.openssl_certificate = self.certificate
        config.openssl_key = self.key
        config.openssl_cafile = self.cafile
        config.openssl_capath = self.capath
        config.openssl_passphrase = self.passphrase
        return config

    def configuration(self, options: BrokerOptions | None = None) -> Configuration:
        """A fresh endpoint configuration with these settings (and ``options``)."""
        return self.apply(Configuration(options))

    def replace(self, **changes: Any) -> TLSSettings:
        """A copy with ``changes`` (field names as above)."""
        return dataclasses.replace(self, **changes)

    def spark_options(self) -> dict[str, str]:
        """The same settings as the ``broker`` data source's ``ssl.*`` options (what is set)."""
        out = {"ssl.disable": "true"} if self.disable_ssl else {}
        for name in (*TLS_FILES, "passphrase"):
            value = getattr(self, name)
            if value:
                out[f"ssl.{name}"] = value
        return out
