"""Shared fixtures: the built fuselm binary, the repository root, and a per-session model cache."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(config, items):
    """Cases whose id holds long_ run only in long mode (long_mode.py, scripts/test.sh --long)."""
    import long_mode
    if long_mode.LONG:
        return
    skip = pytest.mark.skip(reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
    for item in items:
        if long_mode.MARK in item.nodeid.split("::", 1)[-1]:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def fuselm_bin() -> Path:
    path = Path(os.environ.get("FUSELM_BIN", REPO / "build" / "fuselm"))
    assert path.exists(), f"{path} is missing: build first (cmake -S . -B build -G Ninja && ninja -C build)"
    return path


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")
