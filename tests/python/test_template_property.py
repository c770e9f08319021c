"""Property test: randomly generated templates of the supported grammar (nested if/for/set,
macros, filter blocks, filters, tests, methods, whitespace markers, loop variables) with random
data render identically in fuselm and in jinja2 configured as transformers configures it; where
jinja2 raises, fuselm raises too. Seeded: the same 1000 cases every run (3000 in long mode)."""
from __future__ import annotations

import pytest
from transformers.utils.chat_template_utils import _cached_compile_jinja_template

from chat_template_oracle import fuselm_render
from long_mode import LONG
from template_fuzz import random_case

N_CASES = 3000 if LONG else 1000


def jinja_render(source: str, data: dict) -> dict:
    try:
        return {"output": _cached_compile_jinja_template(source).render(**data)}
    except Exception as e:  # noqa: BLE001 - every error is a case where fuselm must fail too
        return {"error": f"{type(e).__name__}: {e}"}


def test_random_templates_match_jinja2(fuselm_bin, tmp_path):
    cases = [random_case(seed) for seed in range(N_CASES)]
    ours = fuselm_render(fuselm_bin, [{"template": t, "variables": d} for t, d in cases], tmp_path)
    mismatches, rendered = [], 0
    for seed, ((source, data), got) in enumerate(zip(cases, ours)):
        want = jinja_render(source, data)
        rendered += "output" in want
        if "output" in want and got.get("output") != want["output"]:
            mismatches.append(f"seed {seed}: {source!r}\n data {data!r}\n jinja2 {want['output']!r}\n fuselm {got!r}")
        elif "error" in want and "error" not in got:
            mismatches.append(f"seed {seed}: {source!r}\n data {data!r}\n jinja2 raised {want['error']}\n fuselm {got!r}")
    assert not mismatches, f"{len(mismatches)} of {N_CASES} differ; first ones:\n" + "\n\n".join(mismatches[:8])
    # Most cases must render, or the comparison says little.
    assert rendered > N_CASES // 2, f"only {rendered} of {N_CASES} cases rendered in jinja2"
