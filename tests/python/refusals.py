"""The one-line refusal that capture gives a token loop it cannot prove (recurrence_by_hand.py)."""
from __future__ import annotations

import pytest


def loop_refusal(capture) -> str:
    """The CaptureError message of capture(): asserted to be one line that says the loop is not a
    recurrence fuselm runs; returned for the caller's own reasons."""
    from fuselm_capture.capture import CaptureError
    with pytest.raises(CaptureError) as err:
        capture()
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert "not a recurrence fuselm runs: " in msg, msg
    return msg
