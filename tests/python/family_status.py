"""Families of the parity lists that do not pass yet, each with the general mechanism it lacks.

The parity tests mark these xfail (not strict: the mechanism may land in another branch first) and
scripts/models_doc.py reports them in docs/models.md with the reason below. A family leaves this
list when the mechanism exists, never by a branch on its name.
"""
from __future__ import annotations

# family -> why it does not pass yet
WAITING: dict[str, str] = {}


# WAITING families that capture and fuse (inspect works); only their outputs are wrong.
RUNS_WRONG: set[str] = set()


def params(families, capture_only: bool = False):
    """pytest params of families, the WAITING ones marked xfail with their reason; capture_only:
    only those whose capture fails (for tests of what capture and the fusers find)."""
    import pytest
    marked = {f for f in WAITING if not (capture_only and f in RUNS_WRONG)}
    return [pytest.param(f, marks=pytest.mark.xfail(reason=WAITING[f], strict=False)) if f in marked else f
            for f in families]
