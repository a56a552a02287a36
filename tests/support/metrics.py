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


_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def base_name(name: str) -> str:
    """A sample's or a family's metric name without the series suffixes."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def documented_metrics() -> set[str]:
    """Every ``groupcoord_*`` metric named in docs/observability.md (base names)."""
    import re
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
    return {base_name(n) for n in re.findall(r"`(groupcoord_[a-z0-9_]+)", doc.read_text())}


def undocumented(scraped: Scrape) -> set[str]:
    """The ``groupcoord_*`` metrics a scrape has that docs/observability.md does not list."""
    names = {base_name(s.name) for s in scraped.samples if s.name.startswith("groupcoord_")}
    return names - documented_metrics()
