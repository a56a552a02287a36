"""Dynamic group configs (Kafka's GroupConfig / GroupConfigManager, KIP-848).

Per group: ``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms`` and
``consumer.assignment.interval.ms`` (KIP-1263), each overriding the server default within the
server's min/max bounds, ``consumer.assignor.offload.enable`` (true/false); and groupcoord's own
client-side assignor settings (docs/client-side-assignors.md):
``consumer.client.assignors.enable`` (true/false), ``consumer.client.assignment.timeout.ms``
(how long a chosen member has to install the target) and
``consumer.client.assignment.fallback.assignor`` (a server assignor, or ``none``).
Streams groups (Kafka 4.4's ``streams.*``, docs/streams-groups.md):
``streams.session.timeout.ms``, ``streams.heartbeat.interval.ms`` (within the shard's
bounds), ``streams.num.standby.replicas`` (at most the shard's maximum),
``streams.task.offset.interval.ms`` (at least the shard's minimum),
``streams.acceptable.recovery.lag`` (a long, at least 0), ``streams.assignor.name`` (a
registered task assignor: ``sticky``), ``streams.initial.rebalance.delay.ms`` (at least 0),
``streams.assignment.interval.ms`` (within the shard's bounds),
``streams.rack.aware.assignment.tags`` (a list, no duplicates),
``streams.num.warmup.replicas`` (at most the shard's maximum) and
``streams.assignor.offload.enable`` (true/false) -- the last two kept with Kafka 4.4.0's
effect: none (its assignor places no warm-up tasks; offloading changes no answer).
Kafka keeps them in the controller; groupcoord keeps them in the group's offsets partition
under their own record key (``GroupConfigKey``, type 64), independent of the group: they
can be set before the group exists and survive its deletion. A group without overrides
has no record.

Validation and messages follow Kafka 4.4's: unknown names and non-integer values are
INVALID_CONFIG; the resulting configs (overrides over the server defaults) must lie within the
shard's bounds (``X must be in the range A to B inclusive.``), and the session timeout must be
greater than the heartbeat interval.

Described as Kafka 4.4 describes them: each config's synonyms are the group's own value
(DYNAMIC_GROUP_CONFIG), the shard's setting under Kafka's broker name
(``group.consumer.heartbeat.interval.ms`` for the shard setting
``consumer_group_heartbeat_interval_ms``; STATIC_BROKER_CONFIG when the shard runs with a value
other than the built-in default) and the built-in default (DEFAULT_CONFIG); the config's source
is the first of them.
"""

from __future__ import annotations

import re

from shards.core.consumer import api
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.records import GroupConfigEntry, GroupConfigKey, GroupConfigValue
from shards.runtime.contract import CoordinatorResult, Record

SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
CLIENT_ASSIGNORS_ENABLE = "consumer.client.assignors.enable"
CLIENT_ASSIGNMENT_TIMEOUT_MS = "consumer.client.assignment.timeout.ms"
CLIENT_ASSIGNMENT_FALLBACK = "consumer.client.assignment.fallback.assignor"
#: KIP-1263 (Kafka 4.4)
ASSIGNMENT_INTERVAL_MS = "consumer.assignment.interval.ms"
ASSIGNOR_OFFLOAD_ENABLE = "consumer.assignor.offload.enable"
#: streams groups (Kafka 4.4's streams.* group configs that groupcoord applies)
STREAMS_SESSION_TIMEOUT_MS = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL_MS = "streams.heartbeat.interval.ms"
STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"
STREAMS_TASK_OFFSET_INTERVAL_MS = "streams.task.offset.interval.ms"
STREAMS_ACCEPTABLE_RECOVERY_LAG = "streams.acceptable.recovery.lag"
STREAMS_ASSIGNOR_NAME = "streams.assignor.name"
STREAMS_INITIAL_REBALANCE_DELAY_MS = "streams.initial.rebalance.delay.ms"
STREAMS_ASSIGNMENT_INTERVAL_MS = "streams.assignment.interval.ms"
STREAMS_RACK_TAGS = "streams.rack.aware.assignment.tags"
#: kept as Kafka 4.4 keeps them, with its 4.4.0 effect: none (no warm-up tasks; offloading
#: changes nothing a client sees)
STREAMS_NUM_WARMUP_REPLICAS = "streams.num.warmup.replicas"
STREAMS_ASSIGNOR_OFFLOAD_ENABLE = "streams.assignor.offload.enable"
#: the task assignors a streams group may name (Kafka's default registers the same one)
STREAMS_ASSIGNORS = ("sticky",)


def split_tags(value: str) -> list[str]:
    """A comma-separated list as Kafka splits it (blanks around commas ignored)."""
    text = value.strip()
    return [] if not text else re.split(r"\s*,\s*", text)


#: the true/false configs
_BOOLEANS = (CLIENT_ASSIGNORS_ENABLE, ASSIGNOR_OFFLOAD_ENABLE, STREAMS_ASSIGNOR_OFFLOAD_ENABLE)
CONFIG_NAMES = tuple(
    sorted(
        (
            HEARTBEAT_INTERVAL_MS,
            SESSION_TIMEOUT_MS,
            ASSIGNMENT_INTERVAL_MS,
            ASSIGNOR_OFFLOAD_ENABLE,
            CLIENT_ASSIGNORS_ENABLE,
            CLIENT_ASSIGNMENT_TIMEOUT_MS,
            CLIENT_ASSIGNMENT_FALLBACK,
            STREAMS_SESSION_TIMEOUT_MS,
            STREAMS_HEARTBEAT_INTERVAL_MS,
            STREAMS_NUM_STANDBY_REPLICAS,
            STREAMS_TASK_OFFSET_INTERVAL_MS,
            STREAMS_ACCEPTABLE_RECOVERY_LAG,
            STREAMS_ASSIGNOR_NAME,
            STREAMS_INITIAL_REBALANCE_DELAY_MS,
            STREAMS_ASSIGNMENT_INTERVAL_MS,
            STREAMS_RACK_TAGS,
            STREAMS_NUM_WARMUP_REPLICAS,
            STREAMS_ASSIGNOR_OFFLOAD_ENABLE,
        )
    )
)
#: the fallback value meaning "no server-side fallback: keep choosing members"
NO_FALLBACK = "none"

_INT_MAX = 2**31 - 1
#: the shard's built-in settings (what DEFAULT_CONFIG reports)
_BUILT_IN = CoordinatorConfig()
#: a group without overrides (never written: the getters read it instead of a new {})
_NO_OVERRIDES: dict[str, str] = {}


class GroupConfigs:
    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self.overrides: dict[str, dict[str, str]] = {}  # group id -> name -> value

    # ---- effective values ----------------------------------------------------------------
    def defaults(self) -> dict[str, str]:
        c = self.config
        return {
            HEARTBEAT_INTERVAL_MS: str(c.consumer_group_heartbeat_interval_ms),
            SESSION_TIMEOUT_MS: str(c.consumer_group_session_timeout_ms),
            ASSIGNMENT_INTERVAL_MS: str(c.consumer_group_assignment_interval_ms),
            ASSIGNOR_OFFLOAD_ENABLE: str(c.consumer_group_assignor_offload_enable).lower(),
            CLIENT_ASSIGNORS_ENABLE: str(c.consumer_group_client_assignors_enable).lower(),
            CLIENT_ASSIGNMENT_TIMEOUT_MS: str(c.consumer_group_client_assignment_timeout_ms),
            CLIENT_ASSIGNMENT_FALLBACK: c.consumer_group_client_assignment_fallback_assignor
            or c.consumer_group_assignors[0],
            STREAMS_SESSION_TIMEOUT_MS: str(c.streams_group_session_timeout_ms),
            STREAMS_HEARTBEAT_INTERVAL_MS: str(c.streams_group_heartbeat_interval_ms),
            STREAMS_NUM_STANDBY_REPLICAS: str(c.streams_group_num_standby_replicas),
            STREAMS_TASK_OFFSET_INTERVAL_MS: str(c.streams_group_task_offset_interval_ms),
            STREAMS_ACCEPTABLE_RECOVERY_LAG: str(c.streams_group_acceptable_recovery_lag),
            STREAMS_ASSIGNOR_NAME: STREAMS_ASSIGNORS[0],
            STREAMS_INITIAL_REBALANCE_DELAY_MS: str(c.streams_group_initial_rebalance_delay_ms),
            STREAMS_ASSIGNMENT_INTERVAL_MS: str(c.streams_group_assignment_interval_ms),
            STREAMS_RACK_TAGS: c.streams_group_rack_aware_assignment_tags,
            STREAMS_NUM_WARMUP_REPLICAS: str(c.streams_group_num_warmup_replicas),
            STREAMS_ASSIGNOR_OFFLOAD_ENABLE: str(c.streams_group_assignor_offload_enable).lower(),
        }

    @staticmethod
    def broker_name(name: str) -> str:
        """Kafka's broker setting behind group config ``name``
        (``consumer.heartbeat.interval.ms`` -> ``group.consumer.heartbeat.interval.ms``;
        ``streams.assignor.name`` -> ``group.streams.assignors``)."""
        if name == STREAMS_ASSIGNOR_NAME:
            return "group.streams.assignors"
        return f"group.{name}"

    @staticmethod
    def setting_name(name: str) -> str:
        """groupcoord's shard setting behind group config ``name``
        (``consumer.heartbeat.interval.ms`` -> ``consumer_group_heartbeat_interval_ms``,
        ``streams.session.timeout.ms`` -> ``streams_group_session_timeout_ms``)."""
        kind, rest = name.split(".", 1)
        return f"{kind}_group_" + rest.replace(".", "_")

    def _broker_synonyms(self, name: str, value: str) -> tuple[api.GroupConfigSynonym, ...]:
        """The shard's setting (when it was given, or is not the built-in one), then the
        built-in default."""
        broker = self.broker_name(name)
        built_in = GroupConfigs(_BUILT_IN).defaults()[name]
        field = self.setting_name(name)
        if name == CLIENT_ASSIGNMENT_FALLBACK:
            # the built-in default is "the first of the shard's assignors"
            built_in = self.config.consumer_group_assignors[0]
            static = bool(self.config.consumer_group_client_assignment_fallback_assignor)
        elif name == STREAMS_ASSIGNOR_NAME:
            static = False  # (one assignor, not a shard setting)
        else:
            static = getattr(self.config, field) != getattr(_BUILT_IN, field)
        static = static or field in self.config.given
        synonyms = [api.GroupConfigSynonym(broker, built_in, api.DEFAULT_CONFIG)]
        if static:
            synonyms.insert(0, api.GroupConfigSynonym(broker, value, api.STATIC_BROKER_CONFIG))
        return tuple(synonyms)

    def session_timeout_ms(self, group_id: str) -> int:
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(SESSION_TIMEOUT_MS)
        return self.config.consumer_group_session_timeout_ms if value is None else int(value)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(HEARTBEAT_INTERVAL_MS)
        return self.config.consumer_group_heartbeat_interval_ms if value is None else int(value)

    def assignment_interval_ms(self, group_id: str) -> int:
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(ASSIGNMENT_INTERVAL_MS)
        return self.config.consumer_group_assignment_interval_ms if value is None else int(value)

    def assignor_offload(self, group_id: str) -> bool:
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(ASSIGNOR_OFFLOAD_ENABLE)
        if value is None:
            return self.config.consumer_group_assignor_offload_enable
        return value.strip().lower() == "true"

    def client_assignors_enabled(self, group_id: str) -> bool:
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(CLIENT_ASSIGNORS_ENABLE)
        if value is None:
            return self.config.consumer_group_client_assignors_enable
        return value == "true"

    def client_assignment_timeout_ms(self, group_id: str) -> int:
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(CLIENT_ASSIGNMENT_TIMEOUT_MS)
        if value is None:
            return self.config.consumer_group_client_assignment_timeout_ms
        return int(value)

    def client_assignment_fallback(self, group_id: str) -> str | None:
        """The server-side assignor a client-side group falls back to (None: none)."""
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(CLIENT_ASSIGNMENT_FALLBACK)
        if value is None:
            value = self.config.consumer_group_client_assignment_fallback_assignor
        if value == NO_FALLBACK:
            return None
        return value or self.config.consumer_group_assignors[0]

    def _streams(self, group_id: str, name: str, default: int) -> int:
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(name)
        return default if value is None else int(value)

    def streams_session_timeout_ms(self, group_id: str) -> int:
        c = self.config
        return self._streams(
            group_id, STREAMS_SESSION_TIMEOUT_MS, c.streams_group_session_timeout_ms
        )

    def streams_heartbeat_interval_ms(self, group_id: str) -> int:
        default = self.config.streams_group_heartbeat_interval_ms
        return self._streams(group_id, STREAMS_HEARTBEAT_INTERVAL_MS, default)

    def streams_num_standby_replicas(self, group_id: str) -> int:
        default = self.config.streams_group_num_standby_replicas
        return self._streams(group_id, STREAMS_NUM_STANDBY_REPLICAS, default)

    def streams_initial_rebalance_delay_ms(self, group_id: str) -> int:
        default = self.config.streams_group_initial_rebalance_delay_ms
        return self._streams(group_id, STREAMS_INITIAL_REBALANCE_DELAY_MS, default)

    def streams_assignment_interval_ms(self, group_id: str) -> int:
        default = self.config.streams_group_assignment_interval_ms
        return self._streams(group_id, STREAMS_ASSIGNMENT_INTERVAL_MS, default)

    def streams_rack_aware_assignment_tags(self, group_id: str) -> str:
        """The client tags the group's members must have ("a,b"; "" none), as Kafka keeps
        them in the group's assignment configs."""
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(STREAMS_RACK_TAGS)
        if value is None:
            value = self.config.streams_group_rack_aware_assignment_tags
        return ",".join(split_tags(value))

    def streams_task_offset_interval_ms(self, group_id: str) -> int:
        default = self.config.streams_group_task_offset_interval_ms
        return self._streams(group_id, STREAMS_TASK_OFFSET_INTERVAL_MS, default)

    def streams_acceptable_recovery_lag(self, group_id: str) -> int:
        default = self.config.streams_group_acceptable_recovery_lag
        return self._streams(group_id, STREAMS_ACCEPTABLE_RECOVERY_LAG, default)

    # ---- AlterGroupConfigs ------------------------------------------------------------------
    def alter(
        self, request: api.AlterGroupConfigsRequest, now_ms: int
    ) -> CoordinatorResult[api.AlterGroupConfigsResponse]:
        group_id = request.group_id
        current = dict(self.overrides.get(group_id, {}))
        seen: set[str] = set()
        for entry in request.configs:
            if entry.name in seen:
                raise ApiError(Errors.INVALID_REQUEST, f"Duplicate config name: {entry.name}")
            seen.add(entry.name)
            if entry.name not in CONFIG_NAMES:
                raise ApiError(Errors.INVALID_CONFIG, f"Unknown group config name: {entry.name}")
            if entry.value is None:
                current.pop(entry.name, None)
            else:
                current[entry.name] = self._parse_value(entry.name, entry.value)
        self._validate({**self.defaults(), **current})
        records: list[Record] = []
        if not request.validate_only and current != self.overrides.get(group_id, {}):
            key = GroupConfigKey(group_id)
            if current:
                entries = tuple(GroupConfigEntry(n, current[n]) for n in sorted(current))
                records.append(Record(key, GroupConfigValue(entries)))
            else:
                records.append(Record(key, None))
        return CoordinatorResult(records, api.AlterGroupConfigsResponse())

    def _parse_value(self, name: str, value: str) -> str:
        if name in _BOOLEANS:
            text = value.strip().lower()
            if text not in ("true", "false"):
                raise ApiError(
                    Errors.INVALID_CONFIG,
                    f"Invalid value {value} for configuration {name}: Expected value to be "
                    "either true or false",
                )
            # Kafka's own config keeps the value as given (described "False" if set so)
            return (
                value
                if name in (ASSIGNOR_OFFLOAD_ENABLE, STREAMS_ASSIGNOR_OFFLOAD_ENABLE)
                else text
            )
        if name == CLIENT_ASSIGNMENT_FALLBACK:
            text = value.strip()
            allowed = (*self.config.consumer_group_assignors, NO_FALLBACK)
            if text not in allowed:
                raise ApiError(
                    Errors.INVALID_CONFIG,
                    f"Invalid value {value} for configuration {name}: one of {', '.join(allowed)}",
                )
            return text
        if name == STREAMS_ASSIGNOR_NAME:
            if value not in STREAMS_ASSIGNORS:
                raise ApiError(
                    Errors.INVALID_CONFIG,
                    f"{name} '{value}' is not a registered task assignor. Registered assignors "
                    f"are: [{', '.join(STREAMS_ASSIGNORS)}].",
                )
            return value
        if name == STREAMS_RACK_TAGS:
            tags = split_tags(value)
            if len(set(tags)) != len(tags):
                raise ApiError(
                    Errors.INVALID_CONFIG,
                    f"{STREAMS_RACK_TAGS} must not contain duplicate tag keys.",
                )
            return ",".join(tags)  # (kept as Kafka keeps a list: "a,b")
        if name == STREAMS_ACCEPTABLE_RECOVERY_LAG:
            return str(self._parse(name, value, 0, "LONG"))
        zero_ok = (
            ASSIGNMENT_INTERVAL_MS,
            STREAMS_NUM_STANDBY_REPLICAS,
            STREAMS_INITIAL_REBALANCE_DELAY_MS,
            STREAMS_ASSIGNMENT_INTERVAL_MS,
            STREAMS_NUM_WARMUP_REPLICAS,
        )
        least = 0 if name in zero_ok else 1
        return str(self._parse(name, value, least))

    @staticmethod
    def _parse(name: str, value: str, least: int, kind: str = "INT") -> int:
        text = value.strip()
        bits = 63 if kind == "LONG" else 31
        try:
            number = int(text)
        except ValueError:
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"Invalid value {value} for configuration {name}: Not a number of type {kind}",
            ) from None
        if not -(2**bits) <= number < 2**bits:
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"Invalid value {value} for configuration {name}: Not a number of type {kind}",
            )
        if number < least:
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"Invalid value {number} for configuration {name}: Value must be at least {least}",
            )
        return number

    def _validate(self, values: dict[str, str]) -> None:
        c = self.config
        for name, low, high in (
            (
                HEARTBEAT_INTERVAL_MS,
                c.consumer_group_min_heartbeat_interval_ms,
                c.consumer_group_max_heartbeat_interval_ms,
            ),
            (
                SESSION_TIMEOUT_MS,
                c.consumer_group_min_session_timeout_ms,
                c.consumer_group_max_session_timeout_ms,
            ),
            (
                ASSIGNMENT_INTERVAL_MS,
                c.consumer_group_min_assignment_interval_ms,
                c.consumer_group_max_assignment_interval_ms,
            ),
            (
                STREAMS_SESSION_TIMEOUT_MS,
                c.streams_group_min_session_timeout_ms,
                c.streams_group_max_session_timeout_ms,
            ),
            (
                STREAMS_HEARTBEAT_INTERVAL_MS,
                c.streams_group_min_heartbeat_interval_ms,
                c.streams_group_max_heartbeat_interval_ms,
            ),
            (
                STREAMS_ASSIGNMENT_INTERVAL_MS,
                c.streams_group_min_assignment_interval_ms,
                c.streams_group_max_assignment_interval_ms,
            ),
        ):
            if not low <= int(values[name]) <= high:
                raise ApiError(
                    Errors.INVALID_CONFIG, f"{name} must be in the range {low} to {high} inclusive."
                )
        # (Kafka 4.4's messages for these two bounds)
        if int(values[STREAMS_NUM_WARMUP_REPLICAS]) > c.streams_group_max_warmup_replicas:
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"{STREAMS_NUM_WARMUP_REPLICAS} must be less than or equal to "
                f"{c.streams_group_max_warmup_replicas}",
            )
        if int(values[STREAMS_NUM_STANDBY_REPLICAS]) > c.streams_group_max_standby_replicas:
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"{STREAMS_NUM_STANDBY_REPLICAS} must be less than or equal to "
                f"{c.streams_group_max_standby_replicas}",
            )
        if (
            int(values[STREAMS_TASK_OFFSET_INTERVAL_MS])
            < c.streams_group_min_task_offset_interval_ms
        ):
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"{STREAMS_TASK_OFFSET_INTERVAL_MS} must be greater than or equal to "
                f"{c.streams_group_min_task_offset_interval_ms}",
            )
        if int(values[SESSION_TIMEOUT_MS]) <= int(values[HEARTBEAT_INTERVAL_MS]):
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"{SESSION_TIMEOUT_MS} must be greater than {HEARTBEAT_INTERVAL_MS}",
            )

    # ---- DescribeGroupConfigs ---------------------------------------------------------------
    def describe(self, group_id: str) -> api.DescribedGroupConfigs:
        overrides = self.overrides.get(group_id, _NO_OVERRIDES)
        defaults = self.defaults()
        configs = []
        for name in CONFIG_NAMES:
            synonyms = self._broker_synonyms(name, defaults[name])
            if name in overrides:
                own = api.GroupConfigSynonym(name, overrides[name], api.DYNAMIC_GROUP_CONFIG)
                synonyms = (own, *synonyms)
            configs.append(
                api.DescribedGroupConfig(
                    name,
                    synonyms[0].value,
                    name not in overrides,
                    synonyms[0].source,
                    synonyms,
                )
            )
        return api.DescribedGroupConfigs(group_id, configs=tuple(configs))

    # ---- state ----------------------------------------------------------------------------------
    def replay(self, key: GroupConfigKey, value: GroupConfigValue | None) -> None:
        if value is None or not value.configs:
            self.overrides.pop(key.group_id, None)
        else:
            self.overrides[key.group_id] = {e.name: e.value for e in value.configs}

    def snapshot_records(self) -> list[Record]:
        return [
            Record(
                GroupConfigKey(gid),
                GroupConfigValue(tuple(GroupConfigEntry(n, v[n]) for n in sorted(v))),
            )
            for gid, v in self.overrides.items()
        ]

    def fingerprint(self) -> object:
        return {gid: tuple(sorted(v.items())) for gid, v in self.overrides.items()}
