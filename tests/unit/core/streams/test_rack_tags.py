"""``streams.rack.aware.assignment.tags`` (Kafka 4.4): kept among the group's assignment
configs -- a change is a new group epoch -- and a member without one of the tags is told
MISSING_CLIENT_TAGS (v1 answers only). Kafka 4.4's sticky assignor does not place tasks by
tags, nor does groupcoord's."""

from __future__ import annotations

from dataclasses import replace

from shards.core.api import RequestContext
from shards.core.streams.records import KeyValue
from shards.core.streams.topology import Status
from tests.unit.core.streams.support import GROUP, as_dict, beat, join, manager, simple_topology
from tests.unit.core.streams.test_replay import assert_replay_equals_live

TEXT = (
    "Missing required client tags for rack-aware standby assignment: [cluster]. Configure "
    "them via 'client.tag.<tagKey>' in your Streams config."
)


def test_a_member_without_the_tags_is_told_and_a_change_of_tags_is_a_new_epoch() -> None:
    mgr, _ = manager(input=4)
    configs = mgr.manager.configs
    configs.overrides[GROUP] = {"streams.rack.aware.assignment.tags": "zone,cluster"}
    tagged = replace(join("a", simple_topology()), client_tags=(KeyValue("zone", "z1"),))
    a = mgr.streams_group_heartbeat(tagged)
    assert [(s.code, s.detail) for s in a.status or ()] == [(Status.MISSING_CLIENT_TAGS, TEXT)]
    group = mgr.groups[GROUP]
    assert group.rack_aware_assignment_tags == "zone,cluster"
    # a v0 request is not told (as Kafka 4.4); the steady path leaves it to the general one
    owned = as_dict(a.active_tasks) or {}
    v0 = replace(beat("a", a.member_epoch, owned), context=RequestContext(api_version=0))
    assert mgr.manager.steady_heartbeat(v0) is None
    assert not mgr.streams_group_heartbeat(v0).status
    # the member gets the tag: nothing to tell
    full = replace(
        beat("a", a.member_epoch, owned),
        client_tags=(KeyValue("zone", "z1"), KeyValue("cluster", "c1")),
    )
    r = mgr.streams_group_heartbeat(full)
    assert not r.status
    epoch = mgr.groups[GROUP].group_epoch
    # another list of tags: a new group epoch (Kafka's LastAssignmentConfigs)
    configs.overrides[GROUP] = {"streams.rack.aware.assignment.tags": "zone"}
    r = mgr.streams_group_heartbeat(beat("a", r.member_epoch, owned))
    assert mgr.groups[GROUP].group_epoch == epoch + 1
    assert mgr.groups[GROUP].rack_aware_assignment_tags == "zone"
    assert_replay_equals_live(mgr)
