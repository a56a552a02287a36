"""Scenarios: what a run does, from a TOML file or a built-in (docs/loadtest.md).

A scenario is a population (groups x members, consumer or classic protocol, static or
dynamic) joining at the start, and a timeline of events at offsets from the start:

* ``restart``    -- members leave and rejoin one by one, ``interval_s`` apart (rolling restart);
* ``vanish``     -- ``count`` members per group stop without leaving (session timeouts);
* ``join``       -- ``count`` new members per group join;
* ``add_groups`` -- ``count`` new groups (with the scenario's members each) start;
* ``hook``       -- run the command named ``hook`` (``--hook NAME=COMMAND``), e.g. to kill a
  shard of the target deployment; a hook that is not given is skipped (and reported).

Each event that changes membership opens a "time to Stable" measurement for the groups it
touches (``hook`` events: every group).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVENT_KINDS = ("restart", "vanish", "join", "add_groups", "hook")
PROTOCOLS = ("consumer", "classic", "mixed")


@dataclass(frozen=True)
class Event:
    at_s: float
    kind: str
    count: int = 1
    interval_s: float = 0.5
    hook: str = ""

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"event kind {self.kind!r}: expected one of {', '.join(EVENT_KINDS)}")
        if self.kind == "hook" and not self.hook:
            raise ValueError("a hook event needs hook = NAME")
        if self.at_s < 0 or self.count < 0:
            raise ValueError("event at_s and count must not be negative")


@dataclass(frozen=True)
class Scenario:
    name: str
    groups: int = 5
    members: int = 4
    duration_s: float = 10.0
    #: consumer (KIP-848), classic, or mixed (even groups consumer, odd groups classic)
    protocol: str = "consumer"
    #: fraction of members with a group.instance.id (0..1)
    static_fraction: float = 0.0
    partitions: int = 12
    commit_interval_s: float = 1.0
    rebalance_timeout_ms: int = 30_000
    #: classic members: session timeout and heartbeat interval they ask for
    session_timeout_ms: int = 10_000
    classic_heartbeat_interval_ms: int = 1_000
    #: seconds over which the initial members start (0: all at once)
    ramp_s: float = 0.0
    #: after the duration: how long to wait for every group to be Stable before closing
    settle_s: float = 30.0
    #: latencies of calls started after this many seconds also go to ``rpcs_after_warmup``
    warmup_s: float = 0.0
    events: tuple[Event, ...] = ()
    description: str = ""
    #: hook commands (name -> shell command); the command line's --hook adds to these
    hooks: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol {self.protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        if self.groups < 1 or self.members < 1 or self.partitions < 1:
            raise ValueError("groups, members and partitions must be at least 1")
        if not 0 <= self.static_fraction <= 1:
            raise ValueError("static_fraction is between 0 and 1")
        if self.duration_s <= 0:
            raise ValueError("duration must be positive")

    def protocol_of(self, group_index: int) -> str:
        if self.protocol == "mixed":
            return "consumer" if group_index % 2 == 0 else "classic"
        return self.protocol

    def is_static(self, member_index: int) -> bool:
        if self.static_fraction <= 0:
            return False
        # spread static members evenly: member i is static when the running share crosses
        return int((member_index + 1) * self.static_fraction) > int(
            member_index * self.static_fraction
        )

    def with_overrides(self, **changes: Any) -> Scenario:
        given = {k: v for k, v in changes.items() if v is not None}
        if "events" in given:
            given["events"] = tuple(given["events"])
        return dataclasses.replace(self, **given)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["events"] = [dataclasses.asdict(e) for e in self.events]
        return d


def _scaled(fraction: float, duration: float) -> float:
    return round(fraction * duration, 3)


def builtin(name: str, duration_s: float | None = None) -> Scenario:
    """The built-in scenarios; their event times are fractions of the duration."""
    d = duration_s or {"join-storm": 20.0}.get(name, 10.0)
    if name == "steady":
        return Scenario(
            "steady", duration_s=d, description="N groups x M members, heartbeats and commits"
        )
    if name == "join-storm":
        return Scenario(
            "join-storm",
            groups=1,
            members=1000,
            partitions=1000,
            duration_s=d,
            settle_s=120.0,
            description="many members join one group at once",
        )
    if name == "rolling-restart":
        return Scenario(
            "rolling-restart",
            duration_s=d,
            static_fraction=0.5,
            protocol="mixed",
            events=(Event(_scaled(0.2, d), "restart", count=0, interval_s=0.2),),
            description="every member leaves and rejoins one by one (half static, half "
            "dynamic; consumer and classic groups)",
        )
    if name == "churn":
        return Scenario(
            "churn",
            duration_s=d,
            events=(
                Event(_scaled(0.2, d), "vanish", count=1),
                Event(_scaled(0.25, d), "join", count=1),
            ),
            description="members vanish without leaving (session timeouts) and others join",
        )
    if name == "shard-kill":
        return Scenario(
            "shard-kill",
            duration_s=d,
            events=(
                Event(_scaled(0.3, d), "hook", hook="kill"),
                Event(_scaled(0.7, d), "hook", hook="restart"),
            ),
            description="a hook kills (then restarts) a shard of the target deployment",
        )
    if name == "scale-out":
        return Scenario(
            "scale-out",
            duration_s=d,
            events=tuple(Event(_scaled(f, d), "add_groups", count=2) for f in (0.2, 0.4, 0.6)),
            description="groups are added while the others run",
        )
    raise ValueError(f"unknown scenario {name!r}; built-ins: {', '.join(BUILTINS)}")


BUILTINS = ("steady", "join-storm", "rolling-restart", "churn", "shard-kill", "scale-out")

_FIELDS = {f.name for f in dataclasses.fields(Scenario)}


def load(path: Path) -> Scenario:
    """A scenario from a TOML file: the fields of :class:`Scenario` at the top level
    (``base = "steady"`` starts from a built-in), events as ``[[events]]`` tables and hook
    commands as a ``[hooks]`` table."""
    data = tomllib.loads(Path(path).read_text())
    return from_dict(data, default_name=Path(path).stem)


def from_dict(data: dict[str, Any], default_name: str = "custom") -> Scenario:
    data = dict(data)
    base_name = data.pop("base", None)
    duration = data.get("duration_s")
    base = builtin(base_name, duration) if base_name else Scenario(default_name)
    unknown = set(data) - _FIELDS
    if unknown:
        raise ValueError(f"unknown scenario fields: {', '.join(sorted(unknown))}")
    if "events" in data:
        data["events"] = tuple(Event(**e) for e in data["events"])
    if "hooks" in data:
        data["hooks"] = {**base.hooks, **{str(k): str(v) for k, v in data["hooks"].items()}}
    data.setdefault("name", base.name if base_name else default_name)
    return dataclasses.replace(base, **data)


def parse_duration(text: str) -> float:
    """``10s``, ``2m``, ``500ms``, ``1h`` or plain seconds."""
    t = text.strip().lower()
    for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if t.endswith(suffix) and t[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(t[: -len(suffix)]) * factor
    return float(t)
