"""``--input`` of the pipeline is told by content, not by name: an export whose name lacks
``.parquet`` was read as JSON Lines, every row dropped as malformed, every table silently
empty (issue 37, item 6). Anything that is neither format fails, naming the input. (No Spark
session here: tests/unit/pipelines/test_group_history.py reads such inputs on Spark.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.group_history import InputError, input_files
from services.history.reader import export_parquet

EVENT = {"ts": 1, "partition": 0, "write": 1, "type": "offset_commit", "group": "g"}


def test_export_without_parquet_in_its_name_is_parquet(tmp_path: Path) -> None:
    export = tmp_path / "EXPORT"
    export_parquet(iter([EVENT]), export)
    assert input_files(str(export)) == ("parquet", [str(export)])


def test_json_lines_file_under_any_name(tmp_path: Path) -> None:
    lines = tmp_path / "history.parquet"  # misnamed the other way
    lines.write_text(json.dumps(EVENT) + "\n")
    assert input_files(str(lines)) == ("json", [str(lines)])


def test_data_dir_reads_its_history_files(tmp_path: Path) -> None:
    history = tmp_path / "data" / "history"
    history.mkdir(parents=True)
    files = [history / f"history-000000000000{n}-1-{n}.jsonl" for n in (1, 2)]
    for f in files:
        f.write_text(json.dumps(EVENT) + "\n")
    assert input_files(str(tmp_path / "data")) == ("json", [str(f) for f in files])


def test_spark_output_dir_leaves_out_markers_and_checksums(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    export_parquet(iter([EVENT]), out / "part-00000")
    (out / "_SUCCESS").write_text("")
    (out / ".part-00000.crc").write_bytes(b"crc\x00")
    assert input_files(str(out)) == ("parquet", [str(out / "part-00000")])


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda p: p.write_text("ts,type\n1,join\n"), "neither Parquet"),
        (lambda p: p.mkdir(), "no Parquet"),
        (lambda p: None, "no such file or directory"),
    ],
    ids=["csv", "empty-dir", "missing"],
)
def test_anything_else_fails_naming_the_input(tmp_path: Path, make, fragment: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "input"
    make(path)
    with pytest.raises(InputError, match=fragment) as ex:
        input_files(str(path))
    assert str(ex.value).startswith(str(path))


def test_both_formats_in_one_directory_fail(tmp_path: Path) -> None:
    export_parquet(iter([EVENT]), tmp_path / "a")
    (tmp_path / "b").write_text(json.dumps(EVENT) + "\n")
    with pytest.raises(InputError, match="both Parquet"):
        input_files(str(tmp_path))
