##! What every Zeek process of the live tests' Broker cluster loads (test_broker_cluster.py),
##! after the docs' snippet that has every node dial the relays.
##!
##! The loggers write their own JSON logs (the oracle). A worker says "ready" once it has
##! both loggers up (round robin has somewhere to go) and all its peers (the manager, the
##! loggers and the two relays): only then is it given its trace, since a Zeek on the
##! Broker backend sends no log write while it has no peer. It ends once the trace is read.

@load policy/frameworks/cluster/backend/broker
@load ./live-types

redef LogAscii::use_json = T;

module Live;

global loggers_up: set[string];
global peers = 0;
global said_ready = F;

function maybe_ready()
	{
	if ( Cluster::local_node_type() != Cluster::WORKER || said_ready )
		return;
	if ( |loggers_up| == 2 && peers >= 5 )
		{
		said_ready = T;
		say("ready");
		}
	}

event zeek_init() &priority=-100
	{
	say(fmt("live %s up", Cluster::node));
	}

event Cluster::node_up(name: string, id: string)
	{
	if ( starts_with(name, "logger-") )
		add loggers_up[name];
	maybe_ready();
	}

event Broker::peer_added(endpoint: Broker::EndpointInfo, msg: string)
	{
	++peers;
	maybe_ready();
	}

event Pcap::file_done(path: string)
	{
	terminate();
	}
