"""Every groupcoord.v1 file declares the options Go and Java callers need (docs/api.md): one Go
package, one Java package with a top-level class per message, and a Java outer class name
that no message, enum or service of the file takes -- otherwise protoc renames it
(``AssignorOuterClass``). Read from the descriptors the Python build generated."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

PROTOS = sorted(
    (Path(__file__).resolve().parents[2] / "proto" / "groupcoord" / "v1").glob("*.proto")
)
GO_PACKAGE = "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1;groupcoordv1"


def test_every_proto_file_is_checked() -> None:
    assert len(PROTOS) >= 9


@pytest.mark.parametrize("proto", PROTOS, ids=lambda p: p.name)
def test_proto_declares_go_and_java_options(proto: Path) -> None:
    module = importlib.import_module(f"groupcoord.v1.{proto.stem}_pb2")
    file = module.DESCRIPTOR
    options = file.GetOptions()
    top_level = {*file.message_types_by_name, *file.enum_types_by_name, *file.services_by_name}
    camel = "".join(part.capitalize() for part in proto.stem.split("_"))

    assert file.package == "groupcoord.v1"
    assert options.go_package == GO_PACKAGE
    assert options.java_package == "io.groupcoord.v1"
    assert options.java_multiple_files
    assert options.java_outer_classname == f"{camel}Proto"
    assert options.java_outer_classname not in top_level
