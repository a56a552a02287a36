"""Generate the Python protobuf/gRPC modules for proto/groupcoord/v1/*.proto.

The one command that produces generated code (run by setup.py at build/install time, and
runnable by hand: ``python proto/build_protos.py``). Output goes next to the .proto files,
so ``groupcoord.v1.<name>_pb2`` imports work both from an editable install and from a wheel.
Generated files are not committed (see .gitignore).
"""

from __future__ import annotations

import pathlib
import sys

PROTO_ROOT = pathlib.Path(__file__).resolve().parent


#: what it needs and how to get it: the one message of every optional feature
#: (services/extras.py; said here in the same words, since this runs before the package exists)
NEEDS = (
    "proto/build_protos.py needs grpcio-tools: run scripts/setup protos (in a checkout) or "
    "pip install 'groupcoord[protos]'"
)


def generate(proto_root: pathlib.Path = PROTO_ROOT) -> list[pathlib.Path]:
    try:
        import grpc_tools
        from grpc_tools import protoc  # the build requires it; by hand, the protos extra
    except ModuleNotFoundError:
        raise SystemExit(f"build_protos: error: {NEEDS}") from None

    sources = sorted((proto_root / "groupcoord" / "v1").glob("*.proto"))
    if not sources:
        raise SystemExit(f"no .proto files under {proto_root}")
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={proto_root}",
        f"--pyi_out={proto_root}",
        f"--grpc_python_out={proto_root}",
        *[str(s.relative_to(proto_root)) for s in sources],
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")
    return sources


if __name__ == "__main__":
    done = generate()
    print(f"generated {len(done)} proto files", file=sys.stderr)
