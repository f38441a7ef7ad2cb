##! The live tests' typed event, what a Zeek prints of it, and how it publishes it.
##!
##! Live::typed has an argument of each Zeek type Spark has no type for. A Zeek converts
##! what it receives with its handler's declared types and drops the event otherwise
##! (an error in its reporter), so the handler below printing an event is the proof
##! that every value arrived as its Zeek type.

module Live;

export {
	type Color: enum { RED, GREEN, BLUE };

	type Info: record {
		n: count;
		s: string &optional;
	};

	global typed: event(c: count, a: addr, p: port, t: time, i: interval, s: set[string],
	                    tb: table[string] of count, v: vector of string, r: Info, e: Color);

	## Print a line the tests wait for (stdout is a file: flushed at once).
	global say: function(line: string);

	## Publish one Live::typed event with the values the tests expect, on ``topic``.
	global publish_typed: function(topic: string);
}

function say(line: string)
	{
	print line;
	flush_all();
	}

function publish_typed(topic: string)
	{
	Cluster::publish(topic, Live::typed, 42, 192.0.2.1, 443/tcp, double_to_time(1700000000.25),
	                 1.5sec, set("a", "b"), table(["x"] = 1), vector("v1", "v2"),
	                 Info($n=7), BLUE);
	say(fmt("published %s", topic));
	}

event Live::typed(c: count, a: addr, p: port, t: time, i: interval, s: set[string],
                  tb: table[string] of count, v: vector of string, r: Info, e: Color)
	{
	say(fmt("received %s", to_json([$c=c, $a=a, $p=p, $t=t, $i=i, $s=s, $tb=tb, $v=v,
	                                $r=r, $e=e])));
	}
