"""Renders chat templates with transformers' own renderer (the oracle) and with
`fuselm apply-template --batch` (many cases in one process, since each template test renders
hundreds of cases)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import jinja2
from transformers.utils.chat_template_utils import render_jinja_template


def transformers_render(template: str, variables: dict) -> dict:
    """{"output": str} or {"error": str, "kind": exception class name} from transformers."""
    kw = dict(variables)
    messages = kw.pop("messages")
    try:
        out, _ = render_jinja_template(conversations=[messages], chat_template=template, **kw)
        return {"output": out[0]}
    except Exception as e:  # noqa: BLE001 - any error the template raises is compared
        return {"error": str(e), "kind": type(e).__name__,
                "raised_by_template": type(e) is jinja2.exceptions.TemplateError}


def fuselm_render(fuselm_bin: Path, cases: list[dict], tmp: Path, extra: list[str] | None = None) -> list[dict]:
    """Renders [{"template": str, "variables": dict}] in one fuselm process."""
    path = tmp / "cases.json"
    path.write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    proc = subprocess.run([str(fuselm_bin), "apply-template", "--batch", "--messages", str(path), *(extra or [])],
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    results = json.loads(proc.stdout.decode("utf-8"))
    assert len(results) == len(cases)
    return results


LINE_PREFIX = re.compile(r"^line \d+: ")


def same_error(oracle: dict, ours: dict) -> bool:
    """The template's own raise_exception message must match exactly; jinja2's errors (undefined
    values, unknown filters, sandbox refusals) too, allowing fuselm's "line N: " prefix."""
    if "error" not in ours:
        return False
    if oracle["raised_by_template"]:
        return ours["error"] == oracle["error"]
    return LINE_PREFIX.sub("", ours["error"]) == oracle["error"]
