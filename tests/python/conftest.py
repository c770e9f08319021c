"""Shared fixtures: the built fuselm binary, the repository root, and a per-session model cache."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def fuselm_bin() -> Path:
    path = Path(os.environ.get("FUSELM_BIN", REPO / "build" / "fuselm"))
    assert path.exists(), f"{path} is missing: build first (cmake -S . -B build -G Ninja && ninja -C build)"
    return path


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")
