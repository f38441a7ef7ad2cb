##! What a Zeek on the Broker backend of the live tests loads (test_broker_backend.py),
##! after the docs' snippet that peers or listens.
##!
##! It says when a peer is added (the tests then give it its trace), ends once a trace
##! is read, publishes one Live::typed event to site/from-zeek/ for each new peer and
##! prints every Live::typed event that reaches it on site/to-zeek/.

@load policy/frameworks/cluster/backend/broker
@load ./live-types

module Live;

event zeek_init()
	{
	Cluster::subscribe("site/to-zeek/");
	say("live zeek up");
	}

event Broker::peer_added(endpoint: Broker::EndpointInfo, msg: string)
	{
	say(fmt("peer_added %s", endpoint$id));
	publish_typed("site/from-zeek/typed");
	}

# Peered, a Zeek reading a trace keeps running at its end: end it (its log batches are
# flushed to its peers as it ends).
event Pcap::file_done(path: string)
	{
	terminate();
	}
