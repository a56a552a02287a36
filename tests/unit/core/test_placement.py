"""Group placement equals Kafka's: abs(String.hashCode) % partitions, Java semantics."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shards.core.placement import INT_MIN, java_string_hashcode, kafka_abs, partition_for

# Values computed by Java's String.hashCode (well known or checked with a JVM).
KNOWN = {
    "": 0,
    "a": 97,
    "hello": 99162322,
    "polygenelubricants": INT_MIN,  # the classic MIN_VALUE example
    "GydZG_": INT_MIN,
    "groupcoord": 1286044630,  # checked with a JVM
}


@pytest.mark.parametrize("s,h", KNOWN.items())
def test_known_java_hashcodes(s: str, h: int) -> None:
    assert java_string_hashcode(s) == h


def test_abs_of_min_int_is_zero_and_negative_hash_is_negated() -> None:
    assert kafka_abs(INT_MIN) == 0
    assert partition_for("polygenelubricants", 50) == 0
    assert kafka_abs(-7) == 7  # a true abs, not a sign-bit mask


@given(st.text(max_size=40))
def test_partition_in_range(s: str) -> None:
    assert 0 <= partition_for(s, 50) < 50


JAVA_SOURCE = """
import java.nio.file.*; import java.util.*;
public class H { public static void main(String[] a) throws Exception {
  var utf8 = java.nio.charset.StandardCharsets.UTF_8;
  for (String line : Files.readAllLines(Paths.get(a[0]), utf8)) {
    String s = new String(Base64.getDecoder().decode(line), utf8);
    int h = s.hashCode(); int abs = (h == Integer.MIN_VALUE) ? 0 : Math.abs(h);
    System.out.println(h + " " + (abs % 50));
  }
}}
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM to compute reference values")
def test_matches_a_real_jvm(tmp_path: Path) -> None:
    import base64
    import random

    rng = random.Random(7)
    samples = [
        "",
        "a",
        "polygenelubricants",
        "GydZG_",
        "é",
        "日本語のグループ",
        "emoji-😀-group",
        "\u0000nul",
        "\uffff",
        "mixed-Ünïcödé-𝄞",
    ]
    alphabet = "abcXYZ019-_.é€😀𝄞日"
    samples += [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(300)
    ]
    (tmp_path / "H.java").write_text(JAVA_SOURCE)
    (tmp_path / "in.txt").write_text(
        "\n".join(base64.b64encode(s.encode("utf-8")).decode() for s in samples) + "\n"
    )
    out = subprocess.run(
        ["java", str(tmp_path / "H.java"), str(tmp_path / "in.txt")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split("\n")
    for s, line in zip(samples, out, strict=False):
        h, p = map(int, line.split())
        assert java_string_hashcode(s) == h, s
        assert partition_for(s, 50) == p, s
