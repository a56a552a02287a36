"""docs/observability.md and the Grafana dashboard stay in step: every metric the dashboard
queries is documented (the real-process and component tests check the other way: every
metric a process exposes is documented)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.metrics import base_name, documented_metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "groupcoord.json"


def _panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_the_dashboard_queries_only_documented_metrics() -> None:
    documented = documented_metrics()
    queried = {
        base_name(name)
        for panel in _panels()
        for target in panel["targets"]
        for name in re.findall(r"groupcoord_[a-z0-9_]+", target["expr"])
    }
    assert queried, "the dashboard queries no groupcoord metric"
    assert queried - documented == set()


def test_the_dashboard_covers_kafkas_group_coordinator_metrics() -> None:
    exprs = " ".join(t["expr"] for p in _panels() for t in p["targets"])
    for name in (
        "groupcoord_groups",
        "groupcoord_consumer_groups",
        "groupcoord_classic_groups",
        "groupcoord_group_rebalances_total",
        "groupcoord_partitions",
        "groupcoord_partition_load_time_max_seconds",
        "groupcoord_event_queue_size",
        "groupcoord_event_loop_idle_ratio",
    ):
        assert name in exprs, name


def test_the_dashboard_is_importable() -> None:
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance"} <= names
    for panel in _panels():
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all(t["refId"] for t in panel["targets"])
