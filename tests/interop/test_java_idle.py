"""Java consumers that read nothing, side by side on groupcoord (coordinator-only) and
Apache Kafka (issue 38 item 4). While the gateway answered Fetch and ListOffsets
NOT_LEADER_OR_FOLLOWER, a Java consumer without committed offsets sent ListOffsets about 5
times a second and refreshed its metadata every second, for ever (Kafka: one ListOffsets,
then Fetch long-polls). Figures, and the hand-over and static-member scenarios (not here:
their Java-client sequences differ from run to run on Kafka too): bench/java_idle.py."""

from __future__ import annotations

import pytest

from tests.interop import java_client
from tests.interop.java_idle import idle_consumers
from tests.interop.support import Target, on_both

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _java() -> None:
    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)


@on_both()
def test_idle_java_consumers_send_no_list_offsets_storm(target: Target) -> None:
    # both group protocols at once, each alone in its group, 3 s once assigned
    for got in idle_consumers(target, ["classic", "consumer"], 3.0):
        requests = got["requests"]
        # Kafka: the one ListOffsets of the position reset (at most), no metadata refresh,
        # Fetch held for fetch.max.wait.ms (500 ms); before the fix 5 ListOffsets and one
        # Metadata a second
        assert requests.get("LIST_OFFSETS", 0) <= 1, got
        assert requests.get("METADATA", 0) <= 1, got
        assert 1 <= requests.get("FETCH", 0) <= 2.5 * got["window_s"] + 2, got
