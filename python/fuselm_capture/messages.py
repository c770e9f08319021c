"""One-line reasons from exception messages, for capture's one error line."""
from __future__ import annotations


def reason(text: str) -> str:
    """The first non-empty line of text, continued by the next lines while a line ends with ':'
    (pydantic-style errors put the reason after "... validator 'x':"), whitespace collapsed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    out = lines[0]
    for line in lines[1:]:
        if not out.endswith(":"):
            break
        out += " " + line
    return " ".join(out.split())
