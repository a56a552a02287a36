from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.spark import local_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = local_spark()
    yield session
    session.stop()
