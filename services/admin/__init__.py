"""The operator tool: ``groupcoord groups|topics|configs`` (docs/cli.md).

What ``kafka-consumer-groups.sh`` does against a broker, done over groupcoord's own gRPC API
with :class:`services.client.CoordinatorClient` (FindCoordinator routing, re-routing on
NOT_COORDINATOR), so it works against ``dev``, one shard, or every shard of a deployment.

* :mod:`.admin` -- the calls: list (fanned out to the owner of every offsets partition),
  describe (ConsumerGroupDescribe, else DescribeGroups), lag, commit, delete, the catalog,
  group configs, and ListOffsets of an upstream cluster when one is given;
* :mod:`.reset` -- reset-offsets plans as data (no I/O): scopes, CSV, the new offsets;
* :mod:`.render` -- rows to ``table`` / ``json`` / ``csv``;
* :mod:`.commands` -- the click commands, the only place that prints or exits.
"""
