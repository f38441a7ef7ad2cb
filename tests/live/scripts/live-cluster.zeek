##! What every Zeek process of the live tests' ZeroMQ cluster loads (tests/live/cluster.py).
##!
##! A worker reads a trace and ends. The manager, besides running the cluster's proxy,
##! serves Zeek's WebSocket API, publishes one Live::typed event to each topic under
##! site/ that somebody subscribes to (once per topic), and prints every Live::typed
##! event that reaches it on site/to-zeek/.
##!
##! A WebSocket client's topics (site/ws-...) get theirs once both have happened: the
##! client is added (Zeek discards what reaches a WebSocket client before its ack,
##! src/cluster/websocket/WebSocket.cc) and the manager's own XPUB has seen the
##! subscription (publisher-side filtering drops what is published before). The two
##! come in either order: the client's ack waits for the subscription to come back to
##! the client's own backend, not to the manager's, which the proxy tells separately.

# The backend, the proxy's endpoints and the CURVE keys, as zeekctl writes them (generated).
@load zeekctl-config
@load ./live-types

module Live;

export {
	## Where the manager serves Zeek's WebSocket API (live-settings.zeek sets it).
	const websocket_port = 0/tcp &redef;
}

@load live-settings

# On the ZeroMQ backend a Zeek reading a trace keeps running at its end: end it (its
# logs are flushed to the loggers as it ends).
event Pcap::file_done(path: string)
	{
	terminate();
	}

@if ( Cluster::local_node_type() == Cluster::MANAGER )

global published: set[string];

event zeek_init()
	{
	Cluster::subscribe("site/to-zeek/");
	if ( websocket_port != 0/tcp )
		Cluster::listen_websocket([$listen_addr=127.0.0.1, $listen_port=websocket_port]);
	}

event zeek_init() &priority=-100
	{
	say(fmt("live manager up, websocket on %s", websocket_port));
	}

function publish_once(topic: string)
	{
	if ( ! starts_with(topic, "site/") || starts_with(topic, "site/to-zeek/") )
		return;
	if ( topic in published )
		return;
	add published[topic];
	publish_typed(topic + "typed");
	}

# WebSocket clients' topics seen by the manager's XPUB, and added with their client.
global ws_subscribed: set[string];
global ws_added: set[string];

event Cluster::Backend::ZeroMQ::subscription(topic: string)
	{
	if ( ! starts_with(topic, "site/ws-") )
		publish_once(topic);
	else
		{
		add ws_subscribed[topic];
		if ( topic in ws_added )
			publish_once(topic);
		}
	}

event Cluster::websocket_client_added(endpoint: Cluster::EndpointInfo, subscriptions: string_vec)
	{
	for ( i in subscriptions )
		{
		local topic = subscriptions[i];
		if ( ! starts_with(topic, "site/ws-") )
			next;
		add ws_added[topic];
		if ( topic in ws_subscribed )
			publish_once(topic);
		}
	}

@endif
