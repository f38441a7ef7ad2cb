"""The store commands that carry the reliable channel's messages, both ways, in one place.

A master and its clones replicate over :mod:`broker_spark.protocol.channel`
(``docs/stores.md``, "The channels"): the master holds a producer whose
consumers are its clones, and a consumer per clone that writes; a clone holds a
consumer of the master and, once it writes, a producer whose one consumer is the
master. On the wire each channel message travels as one of Broker's store
commands: :func:`channel_message` reads the message a command carries, and
:func:`channel_command` makes the command that carries a message. The two
channels differ in their handshake only: ``ack_clone`` (to a clone, with the
master's snapshot) and ``attach_writer`` (to the master), so both functions ask
which way the command travels (``to_master``).
"""

from __future__ import annotations

from broker_spark.protocol import channel as ch
from broker_spark.store.commands import (
    ACTIONS,
    NIL,
    AckCloneCommand,
    AttachWriterCommand,
    CumulativeAckCommand,
    EntityId,
    InternalCommand,
    KeepaliveCommand,
    NackCommand,
    RetransmitFailedCommand,
)

__all__ = ["ChannelMessage", "channel_command", "channel_message"]

ChannelMessage = ch.ProducerMessage | ch.ConsumerMessage


def channel_message(cmd: InternalCommand, *, to_master: bool) -> ChannelMessage | None:
    """The channel message ``cmd`` carries (an action is an event numbered by the command's
    sequence number), or None when it carries none on its way (``to_master``: it came on
    the master's topic, where a handshake is an ``attach_writer``; else an ``ack_clone``)."""
    c = cmd.content
    if isinstance(c, ACTIONS):
        return ch.Event(cmd.seq, c)
    if isinstance(c, KeepaliveCommand):
        return ch.Heartbeat(c.seq)
    if isinstance(c, RetransmitFailedCommand):
        return ch.RetransmitFailed(c.seq)
    if isinstance(c, CumulativeAckCommand):
        return ch.CumulativeAck(c.seq)
    if isinstance(c, NackCommand):
        return ch.Nack(c.seqs)
    if isinstance(c, AttachWriterCommand) and to_master:
        return ch.Handshake(c.offset + 1, c.heartbeat_interval)
    if isinstance(c, AckCloneCommand) and not to_master:
        return ch.Handshake(c.offset + 1, c.heartbeat_interval, c.snapshot)
    return None


def channel_command(
    msg: ChannelMessage, sender: EntityId, receiver: EntityId, *, to_master: bool
) -> InternalCommand:
    """The command carrying ``msg`` from ``sender`` to ``receiver`` (``to_master``: on the
    master's topic). As Broker: an event's command has the event's sequence number and an
    ``ack_clone`` repeats its offset there, the others carry 0; a keepalive goes to every
    consumer at once (receiver nil)."""
    if isinstance(msg, ch.Event):
        return InternalCommand(msg.seq, sender, receiver, msg.content)
    if isinstance(msg, ch.Heartbeat):
        return InternalCommand(0, sender, NIL, KeepaliveCommand(msg.seq))
    if isinstance(msg, ch.CumulativeAck):
        return InternalCommand(0, sender, receiver, CumulativeAckCommand(msg.seq))
    if isinstance(msg, ch.Nack):
        return InternalCommand(0, sender, receiver, NackCommand(msg.seqs))
    if isinstance(msg, ch.RetransmitFailed):
        return InternalCommand(0, sender, receiver, RetransmitFailedCommand(msg.seq))
    offset = msg.first_seq - 1
    if to_master:
        return InternalCommand(
            0, sender, receiver, AttachWriterCommand(offset, msg.heartbeat_interval)
        )
    ack = AckCloneCommand(offset, msg.heartbeat_interval, msg.snapshot or ())
    return InternalCommand(offset, sender, receiver, ack)
