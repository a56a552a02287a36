"""Dynamic group configs (Kafka's GroupConfig / GroupConfigManager, KIP-848).

Per group: ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``, each
overriding the server default within the server's min/max bounds; and groupcoord's own
client-side assignor settings (docs/client-side-assignors.md):
``consumer.client.assignors.enable`` (true/false), ``consumer.client.assignment.timeout.ms``
(how long a chosen member has to install the target) and
``consumer.client.assignment.fallback.assignor`` (a server assignor, or ``none``).
Kafka keeps them in the controller; groupcoord keeps them in the group's offsets partition
under their own record key (``GroupConfigKey``, type 64), independent of the group: they
can be set before the group exists and survive its deletion. A group without overrides
has no record.

Validation and messages follow Kafka's: unknown names and non-integer values are INVALID_CONFIG; the
resulting configs (overrides over the server defaults) must respect the bounds, and the
session timeout must be greater than the heartbeat interval.
"""

from __future__ import annotations

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
CONFIG_NAMES = tuple(
    sorted(
        (
            HEARTBEAT_INTERVAL_MS,
            SESSION_TIMEOUT_MS,
            CLIENT_ASSIGNORS_ENABLE,
            CLIENT_ASSIGNMENT_TIMEOUT_MS,
            CLIENT_ASSIGNMENT_FALLBACK,
        )
    )
)
#: the fallback value meaning "no server-side fallback: keep choosing members"
NO_FALLBACK = "none"

_INT_MAX = 2**31 - 1
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
            CLIENT_ASSIGNORS_ENABLE: str(c.consumer_group_client_assignors_enable).lower(),
            CLIENT_ASSIGNMENT_TIMEOUT_MS: str(c.consumer_group_client_assignment_timeout_ms),
            CLIENT_ASSIGNMENT_FALLBACK: c.consumer_group_client_assignment_fallback_assignor
            or c.consumer_group_assignors[0],
        }

    def session_timeout_ms(self, group_id: str) -> int:
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(SESSION_TIMEOUT_MS)
        return self.config.consumer_group_session_timeout_ms if value is None else int(value)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.overrides.get(group_id, _NO_OVERRIDES).get(HEARTBEAT_INTERVAL_MS)
        return self.config.consumer_group_heartbeat_interval_ms if value is None else int(value)

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
        if name == CLIENT_ASSIGNORS_ENABLE:
            text = value.strip().lower()
            if text not in ("true", "false"):
                raise ApiError(
                    Errors.INVALID_CONFIG,
                    f"Invalid value {value} for configuration {name}: Expected value to be "
                    "either true or false",
                )
            return text
        if name == CLIENT_ASSIGNMENT_FALLBACK:
            text = value.strip()
            allowed = (*self.config.consumer_group_assignors, NO_FALLBACK)
            if text not in allowed:
                raise ApiError(
                    Errors.INVALID_CONFIG,
                    f"Invalid value {value} for configuration {name}: one of {', '.join(allowed)}",
                )
            return text
        return str(self._parse(name, value))

    @staticmethod
    def _parse(name: str, value: str) -> int:
        text = value.strip()
        try:
            number = int(text)
        except ValueError:
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"Invalid value {value} for configuration {name}: Not a number of type INT",
            ) from None
        if not -(2**31) <= number <= _INT_MAX:
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"Invalid value {value} for configuration {name}: Not a number of type INT",
            )
        if number < 1:
            raise ApiError(
                Errors.INVALID_CONFIG,
                f"Invalid value {number} for configuration {name}: Value must be at least 1",
            )
        return number

    def _validate(self, values: dict[str, str]) -> None:
        c = self.config
        heartbeat = int(values[HEARTBEAT_INTERVAL_MS])
        session = int(values[SESSION_TIMEOUT_MS])
        checks = (
            (
                heartbeat < c.consumer_group_min_heartbeat_interval_ms,
                f"{HEARTBEAT_INTERVAL_MS} must be greater than or equal to "
                "group.consumer.min.heartbeat.interval.ms",
            ),
            (
                heartbeat > c.consumer_group_max_heartbeat_interval_ms,
                f"{HEARTBEAT_INTERVAL_MS} must be less than or equal to "
                "group.consumer.max.heartbeat.interval.ms",
            ),
            (
                session < c.consumer_group_min_session_timeout_ms,
                f"{SESSION_TIMEOUT_MS} must be greater than or equal to "
                "group.consumer.min.session.timeout.ms",
            ),
            (
                session > c.consumer_group_max_session_timeout_ms,
                f"{SESSION_TIMEOUT_MS} must be less than or equal to "
                "group.consumer.max.session.timeout.ms",
            ),
            (
                session <= heartbeat,
                f"{SESSION_TIMEOUT_MS} must be greater than {HEARTBEAT_INTERVAL_MS}",
            ),
        )
        for failed, message in checks:
            if failed:
                raise ApiError(Errors.INVALID_CONFIG, message)

    # ---- DescribeGroupConfigs ---------------------------------------------------------------
    def describe(self, group_id: str) -> api.DescribedGroupConfigs:
        overrides = self.overrides.get(group_id, {})
        defaults = self.defaults()
        return api.DescribedGroupConfigs(
            group_id,
            configs=tuple(
                api.DescribedGroupConfig(
                    name, overrides.get(name, defaults[name]), name not in overrides
                )
                for name in CONFIG_NAMES
            ),
        )

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
