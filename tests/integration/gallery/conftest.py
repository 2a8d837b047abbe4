"""Fixtures of the gallery tests: one reference-layout test gallery per session (stubs + wheel built once)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.galleries import ref_gallery


@pytest.fixture(scope="session")
def gallery_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield ref_gallery(tmp_path_factory.mktemp("gallery"))
