"""Consumer groups and the catalog: a new catalog image re-resolves the groups' regular
expressions (with the rights of the caller whose heartbeat resolved each, under the
authorizer) and refreshes their subscribed topics' metadata, bumping the epoch of each group
that changed and asking for its new target; after a load the same catch-up runs once, and
the targets lost in flight with the previous owner are asked for again.
"""

from __future__ import annotations

from collections.abc import Callable

from shards.core.consumer.assignment_tasks import (
    AssignmentTasks,
    assignment_request,
    empty_targets,
)
from shards.core.consumer.client_side import ClientSideAssignments
from shards.core.consumer.group import ConsumerGroup, ResolvedRegex
from shards.core.consumer.membership import TopicFilter, names_after
from shards.core.consumer.records import (
    group_epoch_record,
    partition_metadata_record,
    regular_expression_record,
    topic_metadata,
)
from shards.core.consumer.regex import resolve
from shards.core.errors import ApiError
from shards.core.topics import TopicsImage
from shards.runtime.contract import AsyncTask, CoordinatorResult, Record


class CatalogSync:
    """Keeps the partition's consumer groups (``consumer_groups``) in step with the catalog.
    ``group_assignor``: the server assignor a group's members prefer."""

    def __init__(
        self,
        consumer_groups: Callable[[], list[ConsumerGroup]],
        server_side: AssignmentTasks,
        client_side: ClientSideAssignments,
        group_assignor: Callable[[dict[str, int]], str],
    ) -> None:
        self._consumer_groups = consumer_groups
        self._server_side = server_side
        self._client_side = client_side
        self._group_assignor = group_assignor

    def update_topics(
        self,
        previous: TopicsImage | None,
        image: TopicsImage,
        now_ms: int,
        topic_filter: TopicFilter | None,
    ) -> CoordinatorResult[None]:
        """A new catalog image (already installed): refresh regexes and topic metadata of
        every group, bumping the epoch of those that changed."""
        names_changed = previous is None or previous.by_name.keys() != image.by_name.keys()
        return self._sync_groups(image, names_changed, now_ms, set(), topic_filter)

    def _sync_groups(
        self,
        image: TopicsImage,
        reresolve: bool,
        now_ms: int,
        synced: set[str],
        topic_filter: TopicFilter | None,
    ) -> CoordinatorResult[None]:
        """``synced`` gets the ids of the groups whose epoch moved."""
        records: list[Record] = []
        tasks: list[AsyncTask] = []
        for group in self._consumer_groups():
            if group.members and self._sync_group(
                group, image, reresolve, now_ms, records, tasks, topic_filter
            ):
                synced.add(group.group_id)
        return CoordinatorResult(records, tasks=tasks)

    def _sync_group(
        self,
        group: ConsumerGroup,
        image: TopicsImage,
        reresolve: bool,
        now_ms: int,
        records: list[Record],
        tasks: list[AsyncTask],
        topic_filter: TopicFilter | None,
    ) -> bool:
        """Whether the group's epoch moved."""
        gid = group.group_id
        regexes = group.resolved_regexes
        bump = False
        if reresolve and regexes:
            regexes = dict(regexes)
            for regex, old in group.resolved_regexes.items():
                try:
                    topics = resolve(regex, image)
                except ApiError:  # cannot happen for a regex that resolved before
                    continue
                if topic_filter is not None and old.principal:
                    # with the rights of the caller whose heartbeat resolved it
                    topics = topic_filter(old.principal, topics)
                if topics != old.topics:
                    bump = True
                    regexes[regex] = ResolvedRegex(topics, image.version, now_ms, old.principal)
                    records.append(
                        regular_expression_record(
                            gid, regex, topics, image.version, now_ms, old.principal
                        )
                    )
        names = names_after(group, None, None, regexes)
        metadata = topic_metadata(names, image)
        if metadata != group.subscription_metadata:
            bump = True
            records.append(partition_metadata_record(gid, metadata))
        if not bump:
            return False
        epoch = group.group_epoch + 1
        records.append(group_epoch_record(gid, epoch, group.metadata_hash))
        if not metadata:
            empty_targets(gid, epoch, group.members.values(), group.target_of, records)
            return True
        request = assignment_request(
            group,
            epoch,
            self._group_assignor(group.assignor_counts),
            group.members.values(),
            group.target_of,
            regexes,
            metadata,
        )
        self._client_side.request_target(group, request, records, tasks)
        return True

    def catch_up(
        self, image: TopicsImage, now_ms: int, topic_filter: TopicFilter | None
    ) -> CoordinatorResult[None]:
        """After a load: the catalog may have changed while nobody served the partition, and
        assignments in flight were lost with the previous owner."""
        synced: set[str] = set()
        result = self._sync_groups(image, True, now_ms, synced, topic_filter)
        records, tasks = list(result.records), list(result.tasks)
        for group in self._consumer_groups():
            if (
                group.group_id not in synced
                and self._server_side.needs_assignment(group)
                and group.computing_member() is None
            ):
                self._client_side.request_target(
                    group, self._server_side.group_request(group), records, tasks
                )
        return CoordinatorResult(records, tasks=tasks)
