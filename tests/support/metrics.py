"""Read metrics the way Prometheus does: the text format, parsed by ``prometheus_client``'s
own parser, from a real ``/metrics`` endpoint over HTTP (or any exposition text)."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Scrape:
    """One scrape: every sample, looked up by name and (a subset of) labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.types: dict[str, str] = {}
        self.samples: list[Sample] = []
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for s in family.samples:
                self.samples.append(Sample(s.name, dict(s.labels), float(s.value)))

    def find(self, name: str, **labels: str) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the matching samples (0 when there are none)."""
        return sum(s.value for s in self.find(name, **labels))

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.samples)


def scrape(url: str, timeout: float = 10.0) -> Scrape:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        content_type = response.headers.get("Content-Type", "")
        assert content_type.startswith("text/plain"), content_type
        return Scrape(response.read().decode())
