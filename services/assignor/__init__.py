"""The assignor process (``groupcoord assignor``): serves ``groupcoord.v1.Assignor/Assign``,
stateless, any number of replicas; and the shards' client of it.

* :mod:`.codec` -- ``assignors.spec`` <-> the compact wire format (both sides).
* :mod:`.servicer` -- decode, validate, assign, encode, on a worker thread.
* :mod:`.app` -- the process: gRPC server with health, reflection, OpenTelemetry, graceful stop.
* :mod:`.client` -- ``RemoteAssignor``: the shard's task handler for target assignments, with
  deadlines, retries, round robin over replicas and the in-process fallback.
"""
