"""Build hook: generate protobuf/gRPC code before packaging (regular and editable installs)."""

import pathlib
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent


class BuildWithProtos(build_py):
    def run(self) -> None:
        sys.path.insert(0, str(ROOT / "proto"))
        try:
            import build_protos

            build_protos.generate(ROOT / "proto")
        finally:
            sys.path.pop(0)
        super().run()


setup(cmdclass={"build_py": BuildWithProtos})
