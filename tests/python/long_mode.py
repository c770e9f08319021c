"""Long mode: the cases too slow for CI's budget (scripts/test.sh --long sets FUSELM_LONG=1).

A case runs in long mode only when its pytest id holds `long_` (a test named test_long_..., or a
parameter given a long_ id by split()); conftest.py skips those in the default run. The default run
keeps one or a few cases of each parametrised test, chosen to cover each distinct path, and long
mode runs the rest, so nothing is dropped: only moved.
"""
from __future__ import annotations

import os

import pytest

LONG = os.environ.get("FUSELM_LONG") == "1"
MARK = "long_"


def split(values, default) -> list:
    """pytest params of values (plain values or pytest.param, one argument each): those in default
    keep their id and run every time; the others get the id long_<value> and run in long mode only.
    Raises ValueError when a default value is not among values (a stale list must not pass silently)."""
    default = set(default)
    params, seen = [], set()
    for v in values:
        ps = v if isinstance(v, type(pytest.param(None))) else pytest.param(v)
        value = ps.values[0]
        seen.add(value)
        name = ps.id if ps.id is not None else str(value)
        params.append(pytest.param(*ps.values, marks=ps.marks, id=name if value in default else MARK + name))
    if default - seen:
        raise ValueError(f"long_mode.split: default cases {sorted(default - seen)} are not among the values")
    return params
