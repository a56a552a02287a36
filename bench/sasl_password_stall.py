"""Do password checks stall other clients? (issue 36 item 1, docs/security.md#abuse-resistance)

A ``groupcoord dev`` process with a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-512) and one
user; a probe client, authenticated, sends ApiVersions one after another (10 ms apart) and
records each answer's latency while an attack runs on other connections:

* ``huge``: 10 concurrent PLAIN logins as the real user with a 500 KiB password (just under
  the 512 KiB frame limit before authentication) -- the issue's case -- in rounds for
  ``--seconds`` (at least one round);
* ``flood``: 10 connections each failing PLAIN logins with 1 KiB passwords (the longest
  taken) one after another for ``--seconds``: the checks that do run, off the event loop and
  one at a time per host.

Reported per scenario: the probe's p50/p99/max in milliseconds, the attack's duration and
answers. ``--before RESULT.json``: an earlier result (e.g. of the commit before the change)
kept in this one under ``before``.

    .venv/bin/python -m bench.sasl_password_stall [--seconds 5] [--before RESULT.json]

Results: bench/results/sasl_password_stall.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import report
from tests.support.kafka_wire import KafkaWire, request
from tests.support.processes import sasl_dev

PASSWORD = "alice-secret"
HUGE = 500 * 1024
ATTACKERS = 10


def _api_versions() -> Any:
    return request("api_versions", 3, client_software_name="probe", client_software_version="1")


async def _login(port: int, password: bytes) -> Any:
    """One PLAIN login on a new connection: the SaslAuthenticate answer (the wire is left
    open on success, closed otherwise)."""
    w = await KafkaWire.connect("127.0.0.1", port)
    try:
        await w.send(request("sasl_handshake", 1, mechanism="PLAIN"))
        r = await w.send(
            request("sasl_authenticate", 2, auth_bytes=b"\0alice\0" + password), timeout=120
        )
    except BaseException:
        await w.close()
        raise
    if r.error_code:
        await w.close()
        return r, None
    return r, w


async def _huge(port: int, seconds: float) -> list[str]:
    out: list[str] = []
    until = time.monotonic() + seconds
    while not out or time.monotonic() < until:  # rounds of 10 at once, at least one
        answers = await asyncio.gather(*(_login(port, b"x" * HUGE) for _ in range(ATTACKERS)))
        out += [r.error_message or "ok" for r, _ in answers]
    return out


async def _flood(port: int, seconds: float) -> list[str]:
    out: list[str] = []
    until = time.monotonic() + seconds

    async def one() -> None:
        while time.monotonic() < until:
            r, w = await _login(port, b"w" * 1024)
            out.append(r.error_message or "ok")
            if w is not None:
                await w.close()

    await asyncio.gather(*(one() for _ in range(ATTACKERS)))
    return out


SCENARIOS = {"huge": _huge, "flood": _flood}


async def _scenario(port: int, name: str, seconds: float) -> dict[str, Any]:
    _, probe = await _login(port, PASSWORD.encode())
    assert probe is not None, "the probe could not log in"
    latencies: list[float] = []
    try:
        for _ in range(20):  # warm-up
            await probe.send(_api_versions())
        started = time.perf_counter()
        attack = asyncio.ensure_future(SCENARIOS[name](port, seconds))
        while not attack.done():
            t = time.perf_counter()
            await probe.send(_api_versions(), timeout=120)
            latencies.append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(0.01)
        answers = await attack
        took = time.perf_counter() - started
    finally:
        await probe.close()
    return {
        **report.probe_summary(latencies),
        "attack_s": round(took, 2),
        "attempts": len(answers),
        "answers": dict(Counter(answers)),
    }


def run(seconds: float) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        sasl_dev(Path(tmp) / "dev", {"alice": PASSWORD}, "--log-level", "WARNING") as dev,
    ):
        out = {}
        for name in SCENARIOS:
            out[name] = asyncio.run(_scenario(dev.ports["kafka"], name, seconds))
            r = out[name]
            print(
                f"{name:6} probe p50 {r['probe_p50_ms']:8.2f} ms  p99 {r['probe_p99_ms']:8.2f}"
                f" ms  max {r['probe_max_ms']:8.2f} ms  ({r['attempts']} attempts in "
                f"{r['attack_s']} s)"
            )
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="each attack's duration")
    parser.add_argument("--out", default="bench/results/sasl_password_stall.json")
    parser.add_argument("--before", help="an earlier result, kept under 'before'")
    args = parser.parse_args()
    doc: dict[str, Any] = {
        "when": report.utc_now(),
        "command": report.command("bench.sasl_password_stall"),
        "machine": report.machine(loadavg=True),
        "scenarios": run(args.seconds),
    }
    if args.before:
        doc["before"] = json.loads(Path(args.before).read_text())
    report.write(args.out, doc, newline=True)


if __name__ == "__main__":
    main()
