"""The history of one nemesis run: every operation and every fault, in the order and at the
times the test process saw them, as JSON Lines.

One event per line::

    {"t": 3.412, "type": "invoke", "id": 17, "process": "w2", "op": "commit",
     "key": "g-5/0", "value": 41}
    {"t": 3.420, "type": "ok", "id": 17, ...}

* ``t``: seconds on the test process's monotonic clock since the history began. Every
  workload runs in the test process, so one clock orders all of them: "acknowledged before
  the read was sent" is a comparison of two ``t``.
* ``type``: ``invoke`` (sent), then exactly one of ``ok`` (acknowledged), ``fail`` (refused:
  it did not happen, e.g. an error code that writes nothing) or ``info`` (unknown outcome: a
  timeout, a transport error, no coordinator before the deadline -- it may have happened);
  ``fault`` with ``phase`` ``start`` / ``end``; ``own`` for what group members report
  (``acquire``, ``release``, ``fenced``, ``confirmed``), read by the checker in order.
* ``op`` and ``key``, ``value``: what the workload did (``commit``/``fetch``/``heartbeat``...).

The file is written as the run goes (line-buffered), so a run that hangs or crashes still
leaves what happened up to then.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.t0 = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self._ids = 0
        self._file: IO[str] | None = (
            path.open("w", buffering=1, encoding="utf-8") if path is not None else None
        )
        self.path = path

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def _add(self, event: dict[str, Any]) -> dict[str, Any]:
        event = {"t": self.now(), **event}
        self.events.append(event)
        if self._file is not None:
            self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        return event

    def invoke(self, process: str, op: str, key: str | None = None, value: Any = None) -> int:
        """Record a sent operation; returns its id for :meth:`complete`."""
        self._ids += 1
        self._add(
            {
                "type": "invoke",
                "id": self._ids,
                "process": process,
                "op": op,
                "key": key,
                "value": value,
            }
        )
        return self._ids

    def complete(
        self,
        op_id: int,
        kind: str,
        process: str,
        op: str,
        key: str | None = None,
        value: Any = None,
        error: str | None = None,
    ) -> None:
        """``kind``: ok / fail / info (see the module docstring)."""
        assert kind in ("ok", "fail", "info"), kind
        event: dict[str, Any] = {
            "type": kind,
            "id": op_id,
            "process": process,
            "op": op,
            "key": key,
            "value": value,
        }
        if error is not None:
            event["error"] = error
        self._add(event)

    def fault(self, name: str, phase: str, **detail: Any) -> None:
        self._add({"type": "fault", "fault": name, "phase": phase, **detail})

    def own(self, what: str, group: str, member: str, tp: tuple[str, int] | None = None) -> None:
        self._add(
            {
                "type": "own",
                "what": what,
                "group": group,
                "member": member,
                "tp": list(tp) if tp is not None else None,
            }
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_history(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
