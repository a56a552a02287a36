"""``groupcoord groups|topics|configs``: the operator commands (docs/cli.md).

Exit codes: 0 done; 1 an error (one line on stderr, ``groupcoord: error: ...``: an unknown
group, a refused change, a server that does not answer); 2 a usage error (click's).
Changes are checked for every group before any is made, so a refused command changes
nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from services.admin import reset
from services.admin.admin import Admin, AdminError, Group, Member, TopicPartition, describe_error
from services.admin.render import FORMATS, render
from services.options import TlsArgs, UpstreamArgs, opt, tls_options, upstream_client_options
from shards.core.classic.group import ClassicGroupState
from shards.core.consumer.group import ConsumerGroupState

T = TypeVar("T")

#: the states of consumer, classic and streams groups, as the coordinator names them (a
#: streams group's are a consumer group's and NotReady: shards/core/streams/group.py)
GROUP_STATES = tuple(
    dict.fromkeys(s.value for states in (ClassicGroupState, ConsumerGroupState) for s in states)
) + ("NotReady",)
#: states in which a group's offsets may be changed from outside (Kafka's rule)
INACTIVE = ("Empty", "Dead")


@dataclasses.dataclass(frozen=True)
class Connection:
    bootstrap: str
    num_partitions: int
    timeout_s: float
    upstream: UpstreamArgs
    output: str
    tls: TlsArgs = TlsArgs()

    def run(self, work: Callable[[Admin], Awaitable[T]]) -> T:
        """``work`` with a connected Admin; an AdminError becomes one line and exit 1."""

        async def main() -> T:
            async with Admin(
                self.bootstrap.split(","),
                self.num_partitions,
                timeout_s=self.timeout_s,
                upstream=self.upstream.cluster(),
                tls=self.tls.client(),
            ) as admin:
                return await work(admin)

        try:
            return asyncio.run(main())
        except AdminError as ex:
            raise click.ClickException(str(ex)) from None

    def echo(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        click.echo(render(columns, rows, self.output))


def connection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--bootstrap, --num-partitions, --timeout-ms, --output and the upstream options, given
    to the command as one ``conn: Connection``."""

    @functools.wraps(command)
    def bundled(
        *args: Any,
        bootstrap: str,
        num_partitions: int,
        timeout_ms: int,
        output: str,
        upstream: UpstreamArgs,
        tls: TlsArgs,
        **kw: Any,
    ) -> Any:
        conn = Connection(bootstrap, num_partitions, timeout_ms / 1000, upstream, output, tls)
        return command(*args, conn=conn, **kw)

    f = tls_options(server=False)(bundled)
    f = upstream_client_options(f)
    f = opt(
        "--bootstrap",
        env="BOOTSTRAP",
        default="127.0.0.1:50051",
        help="gRPC addresses of groupcoord servers (dev or any shards), host:port[,...]; "
        "each group's shard is found with FindCoordinator.",
    )(f)
    f = opt(
        "--num-partitions",
        env="NUM_PARTITIONS",
        type=click.IntRange(min=1),
        default=50,
        help="The deployment's offsets partitions (to list the groups of every shard).",
    )(f)
    f = opt(
        "--timeout-ms",
        env="TIMEOUT_MS",
        type=click.IntRange(min=1),
        default=30_000,
        help="How long each operation may take, retries included.",
    )(f)
    f = opt(
        "--output",
        "-o",
        env="OUTPUT_FORMAT",
        type=click.Choice(FORMATS),
        default="table",
        help="table (for people), json or csv (for scripts).",
    )(f)
    return f


# ---- groups ---------------------------------------------------------------------------------
@click.group()
def groups() -> None:
    """Consumer groups (KIP-848 and classic): list, describe, reset or delete offsets, delete
    groups, check a regex subscription -- kafka-consumer-groups.sh over gRPC."""


def _csv_option(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@groups.command("list")
@click.option(
    "--state",
    "states",
    is_flag=False,
    flag_value="",
    default=None,
    help="Show the STATE column; with a value (Stable,Empty,...) only groups in those states.",
)
@click.option(
    "--type",
    "types",
    is_flag=False,
    flag_value="",
    default=None,
    help="Show the TYPE column; with a value (consumer, classic, streams) only groups of that "
    "type.",
)
@connection_options
def list_groups(conn: Connection, states: str | None, types: str | None) -> None:
    """List the groups of every shard."""
    wanted_types = _csv_option(types)
    bad = [t for t in wanted_types if t.lower() not in ("consumer", "classic", "streams")]
    if bad:
        raise click.BadParameter(
            f"{', '.join(bad)}: the types are consumer, classic and streams", param_hint="--type"
        )
    known = {s.lower(): s for s in GROUP_STATES}
    bad = [s for s in _csv_option(states) if s.lower() not in known]
    if bad:
        raise click.BadParameter(
            f"{', '.join(bad)}: the states are {', '.join(GROUP_STATES)}", param_hint="--state"
        )
    listed = conn.run(
        lambda a: a.list_groups(_csv_option(states), [t.lower() for t in wanted_types])
    )
    if conn.output == "table" and states is None and types is None:
        for g in listed:
            click.echo(g.group_id)  # as kafka-consumer-groups --list: the ids alone
        return
    columns = ["GROUP"]
    if types is not None or conn.output != "table":
        columns.append("TYPE")
    if states is not None or conn.output != "table":
        columns.append("STATE")
    if conn.output != "table":
        columns.append("PROTOCOL-TYPE")
    values = {"GROUP": "group_id", "TYPE": "group_type", "STATE": "group_state"}
    values["PROTOCOL-TYPE"] = "protocol_type"
    conn.echo(columns, [[getattr(g, values[c]) for c in columns] for g in listed])


def _assignment(partitions: Sequence[TopicPartition] | None) -> str | None:
    """Kafka's ``topic:0,1;other:2`` (None for none)."""
    if not partitions:
        return None
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items()))


async def _group_ids(admin: Admin, names: Sequence[str], all_groups: bool) -> list[str]:
    return await admin.group_ids() if all_groups else list(dict.fromkeys(names))


def _check_groups_arg(names: Sequence[str], all_groups: bool) -> None:
    if bool(names) == all_groups:
        raise click.UsageError("give group ids or --all-groups (one of them)")


OFFSET_COLUMNS = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]


async def _offset_rows(admin: Admin, group: Group, verbose: bool) -> list[list[Any]]:
    """Kafka's --describe --offsets rows: the members with partitions, most partitions first,
    each partition with its committed offset, log end and lag; then the committed
    partitions no member has, with ``-`` for the consumer."""
    lag = await admin.lag(group.group_id)
    positions = {(t.name, p.partition_index): p for t in lag.topics for p in t.partitions}
    assigned = [m for m in group.members if m.assignment]
    missing = {tp for m in assigned for tp in m.assignment} - set(positions)
    if missing:  # assigned, never committed: its log end still tells the lag to come
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(missing):
            by_topic.setdefault(t, []).append(p)
        more = await admin.lag(group.group_id, by_topic)
        positions.update(
            {(t.name, p.partition_index): p for t in more.topics for p in t.partitions}
        )

    def row(tp: TopicPartition, member: Member | None) -> list[Any]:
        pos = positions.get(tp)
        committed = pos.committed_offset if pos is not None and pos.committed_offset >= 0 else None
        end = pos.log_end_offset if pos is not None and pos.log_end_offset >= 0 else None
        lag_value = end - committed if end is not None and committed is not None else None
        epoch = (
            pos.committed_leader_epoch
            if pos is not None and pos.committed_leader_epoch >= 0
            else None
        )
        cells: list[Any] = [group.group_id, tp[0], tp[1]]
        if verbose:
            cells.append(epoch)
        cells += [committed, end, lag_value]
        cells += [member.member_id, member.host, member.client_id] if member else [None] * 3
        return cells

    rows = []
    done: set[TopicPartition] = set()
    for member in sorted(assigned, key=lambda m: -len(m.assignment)):
        for tp in sorted(member.assignment):
            rows.append(row(tp, member))
            done.add(tp)
    for tp in sorted(positions):
        pos = positions[tp]
        if tp not in done and pos.committed_offset >= 0:
            rows.append(row(tp, None))
    return rows


def _member_rows(group: Group, verbose: bool, with_instance: bool, mixed: bool) -> list[list[Any]]:
    rows = []
    for m in group.members:
        cells: list[Any] = [group.group_id, m.member_id]
        if with_instance:
            cells.append(m.instance_id)
        cells += [m.host, m.client_id, len(m.assignment)]
        if verbose:
            cells += [
                m.member_epoch,
                _assignment(m.assignment),
                group.target_assignment_epoch
                if group.group_type in ("consumer", "streams")
                else None,
                _assignment(m.target_assignment),
            ]
            if mixed:
                cells.append(str(m.member_type == "consumer").lower())
            subscription = (
                m.subscribed_regex
                if m.subscribed_regex is not None
                else ",".join(m.subscribed_topics) or None
            )
            cells += [m.member_type, m.rack, subscription, ",".join(m.protocols) or None]
        rows.append(cells)
    return rows


STATE_COLUMNS = [
    "GROUP",
    "COORDINATOR (ID)",
    "ASSIGNMENT-STRATEGY",
    "STATE",
    "GROUP-EPOCH",
    "TARGET-ASSIGNMENT-EPOCH",
    "#MEMBERS",
    "TYPE",
    "PROTOCOL-TYPE",
    "GENERATION-ID",
    "LEADER-ID",
    "COMPUTING-MEMBER (EPOCH)",
]


def _state_row(g: Group) -> list[Any]:
    return [
        g.group_id,
        f"{g.coordinator}  ({g.coordinator_id})",
        g.assignment_strategy,
        g.state,
        g.group_epoch,
        g.target_assignment_epoch,
        len(g.members),
        g.group_type,
        g.protocol_type,
        g.generation,
        g.leader,
        f"{g.computing_member}  ({g.computing_epoch})" if g.computing_member is not None else None,
    ]


@groups.command()
@click.argument("group_ids", nargs=-1)
@click.option("--all-groups", is_flag=True, help="Every group of every shard.")
@click.option(
    "--offsets",
    "view",
    flag_value="offsets",
    default=True,
    help="Committed offsets, log end and lag per partition (the default).",
)
@click.option("--members", "view", flag_value="members", help="One row per member.")
@click.option(
    "--state", "view", flag_value="state", help="One row per group: state, coordinator, epochs."
)
@click.option(
    "--verbose",
    is_flag=True,
    help="--offsets: LEADER-EPOCH; --members: epochs, assignments, subscriptions.",
)
@connection_options
def describe(
    conn: Connection, group_ids: tuple[str, ...], all_groups: bool, view: str, verbose: bool
) -> None:
    """Describe groups: their offsets and lag (--offsets), members (--members) or state
    (--state). LOG-END-OFFSET and LAG need an upstream cluster (proxy mode), else ``-``."""
    _check_groups_arg(group_ids, all_groups)

    async def work(admin: Admin) -> tuple[list[str], list[list[Any]]]:
        ids = await _group_ids(admin, group_ids, all_groups)
        described = [await admin.describe(g) for g in ids]  # unknown ones fail here, first
        if view == "state":
            return STATE_COLUMNS, [_state_row(g) for g in described]
        if view == "members":
            members = [m for g in described for m in g.members]
            with_instance = any(m.instance_id for m in members)
            kinds = {
                m.member_type for g in described if g.group_type == "consumer" for m in g.members
            }
            mixed = kinds == {"consumer", "classic"}
            columns = ["GROUP", "CONSUMER-ID"]
            columns += ["GROUP-INSTANCE-ID"] if with_instance else []
            columns += ["HOST", "CLIENT-ID", "#PARTITIONS"]
            if verbose:
                columns += [
                    "CURRENT-EPOCH",
                    "CURRENT-ASSIGNMENT",
                    "TARGET-EPOCH",
                    "TARGET-ASSIGNMENT",
                ]
                columns += ["UPGRADED"] if mixed else []
                columns += ["MEMBER-TYPE", "RACK", "SUBSCRIPTION", "PROTOCOLS"]
            return columns, [
                r for g in described for r in _member_rows(g, verbose, with_instance, mixed)
            ]
        columns = list(OFFSET_COLUMNS)
        if verbose:
            columns.insert(3, "LEADER-EPOCH")
        return columns, [r for g in described for r in await _offset_rows(admin, g, verbose)]

    columns, rows = conn.run(work)
    conn.echo(columns, rows)


SCENARIOS = (
    "to_offset",
    "shift_by",
    "to_current",
    "to_earliest",
    "to_latest",
    "to_datetime",
    "by_duration",
    "from_file",
)


@groups.command("reset-offsets")
@click.option("--group", "group_ids", multiple=True, help="The group (repeat for several).")
@click.option("--all-groups", is_flag=True, help="Every group of every shard.")
@click.option("--topic", "topics", multiple=True, help="TOPIC or TOPIC:P,P (repeat for several).")
@click.option("--all-topics", is_flag=True, help="Every partition the group has an offset for.")
@click.option("--to-offset", type=click.IntRange(min=0), default=None, help="This offset.")
@click.option(
    "--shift-by", type=int, default=None, help="The committed offset plus N (N < 0: back)."
)
@click.option(
    "--to-current",
    is_flag=True,
    default=None,
    help="The committed offset (a no-op plan; exports it).",
)
@click.option(
    "--to-earliest", is_flag=True, default=None, help="The log start (needs the upstream)."
)
@click.option("--to-latest", is_flag=True, default=None, help="The log end (needs the upstream).")
@click.option(
    "--to-datetime",
    default=None,
    help="The first offset at or after YYYY-MM-DDTHH:mm:SS.sss[zone] (needs the upstream).",
)
@click.option(
    "--by-duration",
    default=None,
    help="The first offset at or after now minus an ISO-8601 duration, e.g. PT1H "
    "(needs the upstream).",
)
@click.option(
    "--from-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A CSV plan: topic,partition,offset or group,topic,partition,offset.",
)
@click.option(
    "--export", is_flag=True, help="Print the plan as CSV (for --from-file) instead of a table."
)
@click.option("--execute", is_flag=True, help="Commit the new offsets (default: dry run).")
@click.option("--dry-run", is_flag=True, help="Only print the plan (the default).")
@connection_options
def reset_offsets(
    conn: Connection,
    group_ids: tuple[str, ...],
    all_groups: bool,
    topics: tuple[str, ...],
    all_topics: bool,
    export: bool,
    execute: bool,
    dry_run: bool,
    **scenario: Any,
) -> None:
    """Reset committed offsets of inactive groups (no members: Empty, or unknown). Dry run
    unless --execute; a group with members is refused and nothing is changed."""
    if group_ids and all_groups or not (group_ids or all_groups or scenario.get("from_file")):
        raise click.UsageError("give --group or --all-groups (one of them)")
    chosen = [k for k in SCENARIOS if scenario.get(k) is not None and scenario[k] is not False]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --" + ", --".join(s.replace("_", "-") for s in SCENARIOS)
        )
    (mode,) = chosen
    if execute and dry_run:
        raise click.UsageError("--execute and --dry-run exclude each other")
    if mode != "from_file" and bool(topics) == all_topics:
        raise click.UsageError("give --topic or --all-topics (one of them)")
    specs = [reset.parse_topic_spec(t) for t in topics] if topics else []
    plan_file: dict[str, dict[TopicPartition, int]] | None = None
    if mode == "from_file":
        path: Path = scenario["from_file"]
        try:
            text = path.read_text()
        except OSError as ex:
            raise click.ClickException(f"--from-file: {ex.strerror}: {path}") from None
        try:
            plan_file = reset.parse_plan(text, group_ids, str(path))
        except AdminError as ex:
            raise click.ClickException(str(ex)) from None
    try:
        at_ms = (
            reset.parse_datetime(scenario["to_datetime"])
            if mode == "to_datetime"
            else int(time.time() * 1000) - reset.parse_duration_ms(scenario["by_duration"])
            if mode == "by_duration"
            else None
        )
    except AdminError as ex:
        raise click.UsageError(str(ex)) from None

    async def work(admin: Admin) -> dict[str, dict[TopicPartition, int]]:
        ids = await _group_ids(admin, group_ids, all_groups)
        if plan_file is not None and not group_ids and not all_groups:
            ids = list(plan_file)
        # every group is checked before anything changes
        for g in ids:
            try:
                group = await admin.describe(g)
            except AdminError as ex:
                if "does not exist" not in str(ex):
                    raise
                continue  # as Kafka: offsets of an unknown group may be set (a new group)
            if group.state not in INACTIVE:
                raise AdminError(
                    f"group {g!r} has active members (state {group.state}): stop its "
                    "consumers first; nothing was changed"
                )
        catalog = await admin.topic_partitions([s.topic for s in specs]) if specs else {}
        plan: dict[str, dict[TopicPartition, int]] = {}
        for g in ids:
            committed = await admin.committed(g)
            if plan_file is not None:
                wanted = plan_file.get(g, {})
                if specs:
                    in_scope = set(reset.scope(specs, catalog))
                    wanted = {tp: o for tp, o in wanted.items() if tp in in_scope}
                await admin.topic_partitions([t for t, _ in wanted])  # unknown topics fail
                plan[g] = dict(wanted)
                continue
            partitions = reset.scope(specs, catalog) if specs else sorted(committed)
            if mode == "to_offset":
                plan[g] = {tp: scenario["to_offset"] for tp in partitions}
            elif mode == "shift_by":
                plan[g] = reset.shift_by(partitions, committed, scenario["shift_by"])
            elif mode == "to_current":
                without = [tp for tp in partitions if tp not in committed]
                latest = (
                    await admin.list_offsets(
                        without, -1, "--to-current of a partition without a committed offset"
                    )
                    if without
                    else {}
                )
                plan[g] = {tp: committed.get(tp, latest.get(tp, 0)) for tp in partitions}
            elif mode == "to_earliest":
                plan[g] = await admin.list_offsets(partitions, -2, "--to-earliest")
            elif mode == "to_latest":
                plan[g] = await admin.list_offsets(partitions, -1, "--to-latest")
            else:
                found = await admin.list_offsets(
                    partitions, at_ms or 0, f"--{mode.replace('_', '-')}"
                )
                latest = (
                    await admin.list_offsets(
                        [tp for tp, o in found.items() if o < 0], -1, "--to-datetime"
                    )
                    if any(o < 0 for o in found.values())
                    else {}
                )
                plan[g] = {tp: o if o >= 0 else latest[tp] for tp, o in found.items()}
            if (
                mode in ("to_offset", "shift_by", "from_file")
                and admin.upstream is not None
                and plan[g]
            ):
                tps = sorted(plan[g])
                plan[g] = reset.clamp(
                    plan[g],
                    await admin.list_offsets(tps, -2, "range check"),
                    await admin.list_offsets(tps, -1, "range check"),
                )
        if execute:
            for g, offsets in plan.items():
                if offsets:
                    await admin.commit(g, offsets)
        return plan

    plan = conn.run(work)
    if export:
        click.echo(
            reset.export_plan(plan, with_group=len(plan) != 1 or len(group_ids) != 1), nl=False
        )
        return
    conn.echo(
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        [[g, t, p, o] for g, offsets in plan.items() for (t, p), o in sorted(offsets.items())],
    )


async def _require_inactive(admin: Admin, ids: Sequence[str], what: str) -> None:
    for g in ids:
        group = await admin.describe(g)  # unknown: AdminError
        if group.state not in INACTIVE:
            raise AdminError(
                f"group {g!r} has active members (state {group.state}); {what} refused, "
                "nothing was changed"
            )


@groups.command()
@click.option("--group", "group_ids", multiple=True, help="The group (repeat for several).")
@click.option("--all-groups", is_flag=True, help="Every group of every shard.")
@connection_options
def delete(conn: Connection, group_ids: tuple[str, ...], all_groups: bool) -> None:
    """Delete inactive groups and their offsets (every group is checked first)."""
    _check_groups_arg(group_ids, all_groups)

    async def work(admin: Admin) -> list[list[Any]]:
        ids = await _group_ids(admin, group_ids, all_groups)
        await _require_inactive(admin, ids, "deletion")
        rows = []
        for g in ids:
            code, message = await admin.delete_group(g)
            rows.append(
                [g, "Successful" if not code else f"Error: {describe_error(code, message)}"]
            )
        return rows

    rows = conn.run(work)
    conn.echo(["GROUP", "STATUS"], rows)
    failed = [r[0] for r in rows if r[1] != "Successful"]
    if failed:
        raise click.ClickException(f"could not delete {', '.join(failed)}")


@groups.command("delete-offsets")
@click.option("--group", "group_id", required=True, help="The group.")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    required=True,
    help="TOPIC or TOPIC:P,P (repeat for several).",
)
@connection_options
def delete_offsets(conn: Connection, group_id: str, topics: tuple[str, ...]) -> None:
    """Delete a group's committed offsets of some partitions (refused, per partition, for a
    topic the group's members are subscribed to)."""
    specs = [reset.parse_topic_spec(t) for t in topics]

    async def work(admin: Admin) -> list[list[Any]]:
        await admin.describe(group_id)  # an unknown group: one line, nothing done
        catalog = await admin.topic_partitions([s.topic for s in specs])
        partitions = reset.scope(specs, catalog)
        r = await admin.delete_offsets(group_id, partitions)
        if r.error_code:
            raise AdminError(f"group {group_id!r}: {describe_error(r.error_code, r.error_message)}")
        return [
            [
                t.name,
                p.partition_index,
                "Successful" if not p.error_code else f"Error: {describe_error(p.error_code)}",
            ]
            for t in r.topics
            for p in t.partitions
        ]

    rows = conn.run(work)
    conn.echo(["TOPIC", "PARTITION", "STATUS"], sorted(rows))
    if any(r[2] != "Successful" for r in rows):
        raise click.ClickException(f"some offsets of group {group_id!r} were not deleted")


@groups.command("verify-regex")
@click.argument("regex")
@click.option(
    "--topics", default=None, help="Match these topics (comma-separated) instead of the catalog's."
)
@connection_options
def verify_regex(conn: Connection, regex: str, topics: str | None) -> None:
    """Check REGEX as the coordinator evaluates a subscription (RE2, whole topic names) and
    list the topics it matches."""
    from shards.core.consumer.regex import compile_regex
    from shards.core.errors import ApiError

    try:
        pattern = compile_regex(regex)
    except ApiError as ex:
        raise click.ClickException(ex.message or str(ex)) from None
    names = _csv_option(topics) if topics is not None else None
    if names is None:
        names = [t.name for t in conn.run(lambda a: a.describe_topics())]
    conn.echo(["TOPIC"], [[n] for n in sorted(names) if pattern.fullmatch(n) is not None])


# ---- topics ---------------------------------------------------------------------------------
@click.group()
def topics() -> None:
    """The topic catalog the coordinator assigns from."""


TOPIC_COLUMNS = ["TOPIC", "TOPIC-ID", "PARTITIONS", "RACKS"]


def _topic_rows(described: Sequence[Any]) -> list[list[Any]]:
    return [
        [
            t.name,
            t.topic_id,
            t.num_partitions,
            ";".join(f"{i}:{','.join(r.racks)}" for i, r in enumerate(t.partition_racks) if r.racks)
            or None,
        ]
        for t in sorted(described, key=lambda t: t.name)
    ]


@topics.command("list")
@connection_options
def list_topics(conn: Connection) -> None:
    """Every topic of the catalog."""
    conn.echo(TOPIC_COLUMNS, _topic_rows(conn.run(lambda a: a.describe_topics())))


@topics.command("describe")
@click.argument("names", nargs=-1, required=True)
@connection_options
def describe_topics(conn: Connection, names: tuple[str, ...]) -> None:
    """Topics by name (an unknown one is an error)."""

    async def work(admin: Admin) -> list[Any]:
        await admin.topic_partitions(names)
        return await admin.describe_topics(names)

    conn.echo(TOPIC_COLUMNS, _topic_rows(conn.run(work)))


@topics.command("create")
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), required=True)
@click.option("--validate-only", is_flag=True, help="Check, create nothing.")
@connection_options
def create_topic(conn: Connection, name: str, partitions: int, validate_only: bool) -> None:
    """Add a topic to the catalog (refused in proxy mode, where the catalog mirrors the
    upstream cluster: create it there)."""
    t = conn.run(lambda a: a.create_topic(name, partitions, validate_only))
    conn.echo(["TOPIC", "TOPIC-ID", "PARTITIONS"], [[t.name, t.topic_id or None, t.num_partitions]])


@topics.command("delete")
@click.argument("names", nargs=-1, required=True)
@connection_options
def delete_topics(conn: Connection, names: tuple[str, ...]) -> None:
    """Remove topics from the catalog (all are checked to exist first), also one the
    catalog holds but does not serve (over --max-partitions-per-topic)."""

    async def work(admin: Admin) -> None:
        await admin.topic_partitions(names, refused_too=True)
        for n in dict.fromkeys(names):
            await admin.delete_topic(n)

    conn.run(work)
    conn.echo(["TOPIC", "STATUS"], [[n, "Deleted"] for n in dict.fromkeys(names)])


# ---- group configs --------------------------------------------------------------------------
@click.group()
def configs() -> None:
    """Dynamic group configs (consumer.session.timeout.ms, consumer.heartbeat.interval.ms,
    consumer.client.*: docs/client-side-assignors.md)."""


@configs.command("describe")
@click.option(
    "--group", "group_ids", multiple=True, required=True, help="The group (repeat for several)."
)
@connection_options
def describe_configs(conn: Connection, group_ids: tuple[str, ...]) -> None:
    """A group's configs, set or default."""

    async def work(admin: Admin) -> list[list[Any]]:
        rows = []
        for g in dict.fromkeys(group_ids):
            r = await admin.describe_configs(g)
            rows += [[g, c.name, c.value, str(c.is_default).lower()] for c in r.configs]
        return rows

    conn.echo(["GROUP", "NAME", "VALUE", "IS-DEFAULT"], conn.run(work))


@configs.command("alter")
@click.option("--group", "group_id", required=True, help="The group.")
@click.option("--set", "assignments", multiple=True, help="name=value (repeat for several).")
@click.option("--delete", "deletions", multiple=True, help="A config back to the default.")
@click.option("--validate-only", is_flag=True, help="Check, change nothing.")
@connection_options
def alter_configs(
    conn: Connection,
    group_id: str,
    assignments: tuple[str, ...],
    deletions: tuple[str, ...],
    validate_only: bool,
) -> None:
    """Set or delete a group's configs (all in one request: all or nothing)."""
    changes: dict[str, str | None] = {}
    for a in assignments:
        name, sep, value = a.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{a!r}: expected name=value", param_hint="--set")
        changes[name.strip()] = value.strip()
    changes.update({d: None for d in deletions})
    if not changes:
        raise click.UsageError("give --set name=value or --delete name")
    conn.run(lambda a: a.alter_configs(group_id, changes, validate_only))

    async def after(admin: Admin) -> Any:
        return await admin.describe_configs(group_id)

    r = conn.run(after)
    conn.echo(
        ["GROUP", "NAME", "VALUE", "IS-DEFAULT"],
        [[group_id, c.name, c.value, str(c.is_default).lower()] for c in r.configs],
    )
