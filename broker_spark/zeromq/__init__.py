"""Zeek's ZeroMQ cluster backend: broker-spark as a cluster's logger (a PULL socket Zeek
nodes PUSH their log batches to) and as a node of its publish/subscribe (XPUB/XSUB
connected to the cluster's proxy), with CURVE as Zeek configures it.

pyzmq, the ZeroMQ project's binding, carries every byte of ZeroMQ's own wire; this
package only speaks Zeek's messages over it (ZEEK-ZEROMQ.md).
"""
