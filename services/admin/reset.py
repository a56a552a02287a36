"""reset-offsets plans as data, the way Kafka's ``kafka-consumer-groups --reset-offsets`` makes
them: which partitions (``--topic T[:P,P]`` or ``--all-topics``), their new offsets for each
scenario, the CSV plan of ``--from-file`` / ``--export``. No I/O: the command fetches what a
plan needs (committed offsets, the catalog, the upstream's ListOffsets) and passes it in.
"""

from __future__ import annotations

import csv
import datetime
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import isodate

from services.admin.admin import AdminError, TopicPartition


@dataclass(frozen=True)
class TopicSpec:
    topic: str
    partitions: tuple[int, ...] | None  # None = every partition of the topic


def parse_topic_spec(text: str) -> TopicSpec:
    """``topic`` or ``topic:0,1,2`` (Kafka's --topic)."""
    topic, sep, parts = text.partition(":")
    if not topic:
        raise AdminError(f"--topic {text!r}: no topic name")
    if not sep:
        return TopicSpec(topic, None)
    try:
        partitions = tuple(int(p) for p in parts.split(","))
    except ValueError:
        raise AdminError(f"--topic {text!r}: partitions are numbers, as in {topic}:0,1") from None
    if not partitions or min(partitions) < 0:
        raise AdminError(f"--topic {text!r}: partitions are numbers >= 0")
    return TopicSpec(topic, partitions)


def scope(specs: Sequence[TopicSpec], catalog: Mapping[str, int]) -> list[TopicPartition]:
    """The partitions the specs name, checked against the catalog (name -> partition
    count): an unknown topic or partition is an AdminError, as Kafka refuses it."""
    out: dict[TopicPartition, None] = {}
    for spec in specs:
        count = catalog.get(spec.topic)
        if count is None:
            raise AdminError(f"unknown topic {spec.topic!r}")
        partitions = spec.partitions if spec.partitions is not None else range(count)
        for p in partitions:
            if p >= count:
                raise AdminError(f"topic {spec.topic!r} has no partition {p} (it has {count})")
            out[(spec.topic, p)] = None
    return sorted(out)


def parse_plan(
    text: str, groups: Sequence[str], source: str
) -> dict[str, dict[TopicPartition, int]]:
    """A reset plan in Kafka's CSV: ``topic,partition,offset`` lines for one group (given
    with --group), or ``group,topic,partition,offset`` lines. AdminError naming the line of
    anything else."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if not rows:
        raise AdminError(f"{source}: no reset plan in the file")
    plan: dict[str, dict[TopicPartition, int]] = {}
    width = len(rows[0])
    for n, row in enumerate(rows, 1):
        if len(row) != width or width not in (3, 4):
            raise AdminError(
                f"{source} line {n}: expected topic,partition,offset or "
                f"group,topic,partition,offset, got {','.join(row)!r}"
            )
        if width == 3:
            if len(groups) != 1:
                raise AdminError(
                    f"{source}: lines without a group need exactly one --group "
                    "(or use group,topic,partition,offset)"
                )
            group, (topic, partition, offset) = groups[0], row
        else:
            group, topic, partition, offset = row
        try:
            tp, value = (topic.strip(), int(partition)), int(offset)
        except ValueError:
            raise AdminError(
                f"{source} line {n}: partition and offset are numbers, got {','.join(row)!r}"
            ) from None
        if not tp[0] or tp[1] < 0 or value < 0:
            raise AdminError(f"{source} line {n}: {','.join(row)!r} is not a valid position")
        plan.setdefault(group.strip(), {})[tp] = value
    return plan


def export_plan(plan: Mapping[str, Mapping[TopicPartition, int]], with_group: bool) -> str:
    """Kafka's --export CSV (no header), readable again with --from-file."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for group, offsets in plan.items():
        for (topic, partition), offset in sorted(offsets.items()):
            writer.writerow(
                [group, topic, partition, offset] if with_group else [topic, partition, offset]
            )
    return out.getvalue()


def shift_by(
    partitions: Sequence[TopicPartition], committed: Mapping[TopicPartition, int], n: int
) -> dict[TopicPartition, int]:
    missing = [f"{t}:{p}" for t, p in partitions if (t, p) not in committed]
    if missing:
        raise AdminError(f"--shift-by: no committed offset to shift for {', '.join(missing)}")
    return {tp: max(0, committed[tp] + n) for tp in partitions}


def clamp(
    offsets: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Offsets outside the log moved to its nearest end (Kafka warns and does the same)."""
    return {tp: min(max(o, earliest.get(tp, o)), latest.get(tp, o)) for tp, o in offsets.items()}


def parse_datetime(text: str) -> int:
    """--to-datetime: ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``, ``+01:00``);
    without one, local time as Kafka reads it. Milliseconds since the epoch."""
    try:
        value = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise AdminError(
            f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss[+HH:MM|Z]"
        ) from None
    return int(value.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """--by-duration: an ISO-8601 duration (``PT1H30M``, ``P2D``), Java's Duration."""
    try:
        value = isodate.parse_duration(text)
    except (isodate.ISO8601Error, ValueError):
        raise AdminError(
            f"--by-duration {text!r}: expected an ISO-8601 duration such as PT1H30M"
        ) from None
    if not isinstance(value, datetime.timedelta):
        raise AdminError(
            f"--by-duration {text!r}: use days, hours, minutes and seconds (PnDTnHnMnS)"
        )
    return int(abs(value.total_seconds()) * 1000)
