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
    if out.startswith("Constraints violated"):
        # torch.export's first line says only that a dynamic dimension was specialised; the guard
        # that did it ("Not all values of num_tokens ... satisfy the generated guard ...") follows.
        guard = next((line for line in lines[1:] if "satisfy the generated guard" in line
                      or "must be specialized" in line or "inferred to be a constant" in line
                      or "specialized it to be a constant" in line), None)
        if guard is not None:
            # torch's advice on mark_dynamic / Dim.DYNAMIC after the cause is about its own API.
            out = out.split("!")[0] + ": " + guard.lstrip("- ").split(" If you're using")[0] + (
                " (the forward branches on or fixes the token count, so one graph cannot serve every length)")
    return " ".join(out.split())
