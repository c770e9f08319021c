"""Writes docs/models.md from a parity run: every family of the parity lists, pass or fail, the
fusions `fuselm inspect --json` reports, and for a failure the mechanism it lacks.

Each family is built as the parity tests build it (tests/python/{tiny,mla,moe}_models.py), run by
`fuselm generate` on prompts of 1, 7 and 300 tokens and compared with transformers by
tests/python/parity.check_parity (greedy 32 tokens, logits within 1e-3 x max|logit|). A failure's
reason is tests/python/family_status.WAITING's when the family is listed there, else the first
line of what failed.

    .venv/bin/python scripts/models_doc.py [--models DIR] [--out docs/models.md] [--only FAMILY ...]
                                           [--lengths 1 7 300]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "python"))

import family_status  # noqa: E402
import mla_models  # noqa: E402
import moe_models  # noqa: E402
import numpy as np  # noqa: E402
import parity  # noqa: E402
import tiny_models  # noqa: E402

PROMPT_LENGTHS = [1, 7, 300]


def families() -> list[tuple[str, str, str, object]]:
    """(row key, family, list it comes from, its builder module) for every parity family; a name
    in two lists (deepseek_v2 is in the MLA and the MoE list) gets the list as a suffix."""
    out = [(f, "dense", tiny_models) for f in tiny_models.FAMILIES]
    out += [(f, "latent attention", mla_models) for f in mla_models.MLA_FAMILIES]
    out += [(f, "mixture of experts", moe_models) for f in moe_models.MOE_FAMILIES]
    seen: dict[str, int] = {}
    for f, _, _ in out:
        seen[f] = seen.get(f, 0) + 1
    suffix = {"dense": "dense", "latent attention": "mla", "mixture of experts": "moe"}
    return [(f if seen[f] == 1 else f"{f}_{suffix[k]}", f, k, m) for f, k, m in out]


def config_class(module, family: str) -> str:
    table = getattr(module, "FAMILIES", None) or getattr(module, "MLA_FAMILIES", None) or module.MOE_FAMILIES
    return table[family][0]


def fusions(fuselm: Path, model_dir: Path) -> str:
    """'attention 3/3, qkv 3/3, ...': applied/candidates per fuser that had a candidate."""
    proc = subprocess.run([str(fuselm), "inspect", str(model_dir), "--json"], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        return "inspect failed"
    totals = json.loads(proc.stdout)["totals"]
    return ", ".join(f"{k} {v['applied']}/{v['candidates']}" for k, v in sorted(totals.items()) if v["candidates"])


def first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    picked = next((ln for ln in lines if "error:" in ln), lines[0] if lines else type(e).__name__)
    return picked[:300].replace("|", "\\|")


def run_family(fuselm: Path, models: Path, key: str, family: str, module, lengths: list[int]) -> dict:
    model_dir = models / key
    t0 = time.time()
    row = {"family": key, "lengths": lengths, "date": time.strftime("%Y-%m-%d")}
    try:
        if not (model_dir / "config.json").exists():
            module.build(family, model_dir)
        vocab = module.make_config(family).vocab_size
        model = parity.hf_model(model_dir)
        worst = 0.0
        with tempfile.TemporaryDirectory() as tmp:
            for n in lengths:
                prompt = [int(x) for x in np.random.default_rng(n).integers(0, vocab, size=n)]
                worst = max(worst, parity.check_parity(f"{family}/{n}", fuselm, model_dir, prompt, Path(tmp),
                                                       model=model))
        row.update(status="pass", worst=f"{worst:.1e}")
    except BaseException as e:  # noqa: BLE001 - a failing family is a row, not the end of the run
        if isinstance(e, KeyboardInterrupt):
            raise
        row.update(status="fail", reason=family_status.WAITING.get(key) or first_line(e))
    row["fusions"] = fusions(fuselm, model_dir) if (model_dir / "config.json").exists() else ""
    print(f"{key}: {row['status']} ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    return row


# Written by hand (tests/python/test_multimodal_wrappers.py is its parity run); kept between the tables.
WRAPPERS_SECTION = """
## Multimodal wrappers (text only)

A checkpoint of a `...ForConditionalGeneration` wrapper (a language model with a `text_config`,
plus a vision or audio tower and a projector) runs as a text model: `fuselm generate DIR` and
`fuselm serve DIR` take it as they take a causal LM. Capture builds the wrapper class
transformers' AutoModelForMultimodalLM maps the config to and exports its forward on token ids
alone, so the graph is exactly what the wrapper computes for a text-only prompt; sizes
and token ids come from `config.get_text_config()`; the towers are not loaded and are named once
in a `fuselm: note:` line with their checkpoint prefix and tensor count (`docs/ir.md`). Image and
audio input are not supported yet: the server refuses an `image_url` or `input_audio` content part
with a 400. `tests/python/test_multimodal_wrappers.py` builds each family tiny (a 2-layer,
width-64 language model and a one-layer vision or audio tower, `tests/python/wrapper_models.py`)
and checks greedy tokens and logits against the wrapper's own forward on prompts of 1, 7 and 300
tokens, as above (five families in the default run: gemma3, llava, paligemma, qwen2_5_vl, voxtral;
every family in `scripts/test.sh --long`).

Pass: gemma3, mistral3, llava, llava_next, llava_onevision, aya_vision, cohere2_vision, internvl,
idefics3, smolvlm, paligemma, lfm2_vl (a short-convolution layer, as
`fuselm.causal_conv1d`, and an attention layer), got_ocr2, mllama (its cross-attention layers, which a text-only
prompt skips), qwen2_vl, qwen2_5_vl, qwen3_vl, glm4v (vision towers); qwen2_audio, voxtral (audio
towers). (The sweep
below still lists wrappers as skipped: it builds models through AutoModelForCausalLM from config
defaults; this list is built by the test above.)

GGUF: transformers' GGUF loader reads only text models. For `gemma3`/`gemma4` files it builds the
text config (`gemma3_text`, `gemma4_text`): such files hold only the text backbone (the vision
tower ships as a separate `mmproj` file, which it never reads). Every other architecture it
accepts is a text one (a wrapper's own, such as `qwen2vl`, it does not load at all). So a GGUF is
always run as a text model, through the GGUF path (`docs/gguf.md`), with no wrapper involved.
"""


def rows_of(known: dict, kinds: dict) -> list[dict]:
    """Rows in list order; a family with no row yet (not run) says so."""
    return [known.get(f, {"family": f, "status": "not run", "fusions": ""}) for f in kinds]


def render(rows: list[dict], kinds: dict[str, tuple[str, str]]) -> str:
    import torch
    import transformers
    n_pass = sum(r["status"] == "pass" for r in rows)
    n_not_run = sum(r["status"] == "not run" for r in rows)
    out = [
        "# Model families",
        "",
        "Generated by `scripts/models_doc.py` from a parity run (do not edit by hand): each family is a",
        "tiny random-weight model built from its transformers config class as the parity tests build it",
        "(`tests/python/tiny_models.py`, `mla_models.py`, `moe_models.py`), run by `fuselm generate` on",
        "prompts of N tokens (the *prompts* column; the parity tests run 1, 7 and 300): greedy 32 tokens",
        "equal to transformers' and every logits row",
        "within 1e-3 x max|logit| (fp32). *Fusions* are `fuselm inspect --json`'s totals, applied/candidates",
        "per fuser; what no fuser took runs in the generic ATen interpreter. A failure names the general",
        "mechanism the family lacks (`tests/python/family_status.py`); no family is special-cased.",
        "",
        f"transformers {transformers.__version__}, torch {torch.__version__}: {n_pass} of {len(rows)} pass"
        + (f", {n_not_run} not run in this generation." if n_not_run else "."),
        "",
        "| family | config class | kind | prompts | parity | worst rel. logit diff | fusions | lacks | run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cls, kind = kinds[r["family"]]
        lengths = "/".join(map(str, r.get("lengths", [])))
        out.append(f"| {r['family']} | {cls} | {kind} | {lengths} | {r['status']} | {r.get('worst', '')} | {r['fusions']} | "
                   f"{r.get('reason', '')} | {r.get('date', 'earlier session')} |")
    return "\n".join(out) + "\n"


# Failure text -> the general mechanism it shows (first match wins); for the grouping only.
MECHANISMS = [
    ("Constraints violated", "the forward specialises the token count (a recurrent or state-space scan, or a branch "
                             "on the length): one graph cannot serve every length"),
    ("reads its attention mask as a tensor", "the model computes with its attention mask tensor (sparse-attention "
                                             "indexers, learned masks): the attention op takes a mask kind"),
    ("gating function", "an experts gating function outside the engine's forms"),
    ("has no fuselm.attention op", "tokens meet outside any attention op (recurrence)"),
    ("calls attention twice", "one module calls attention twice per layer (differential attention): refused, "
                              "the KV cache holds one K/V per layer"),
    ("reach its softmax", "attention written by hand that capture cannot prove (several products into one softmax)"),
    ("attention written by hand in", "attention written by hand that capture cannot prove"),
    ("activation", "an activation outside the experts op's forms"),
    ("Cannot cast FakeTensor", "experts dispatch reading a data-dependent count that neither experts rule covers"),
    ("GuardOnDataDependentSymNode", "experts dispatch reading a data-dependent count that neither experts rule "
                                    "covers"),
    ("outside its subgraph", "a fuser's match error"),
    ("positions counted from 0", "float data computed from arange(T), the step's positions counted from 0, "
                                 "that the position input cannot replace (also an index, or no position input)"),
]


def mechanism(row: dict) -> str:
    if row.get("stage") in ("config", "transformers"):
        return ("transformers itself does not build or run the tiny config (a consistency constraint of the "
                "config the generic shrink does not meet)")
    if row.get("stage") == "timeout":
        return "capture did not finish within the sweep's timeout"
    if row.get("stage") == "crash":
        return "the sweep's worker was stopped (memory or time)"
    text = row.get("error", "")
    return next((m for key, m in MECHANISMS if key in text), "other: " + text[:120])


def render_sweep(rows: dict) -> str:
    """The table of scripts/family_sweep.py's rows: transformers' causal-LM families no parity
    list names, each built tiny from its config class's defaults and tried as a new user would."""
    order = sorted(rows.values(), key=lambda r: ({"pass": 0, "fail": 1, "skip": 2}[r["status"]], r["family"]))
    tried = [r for r in order if r["status"] != "skip"]
    n_pass = sum(r["status"] == "pass" for r in tried)
    dates = sorted({r.get("date", "") for r in order} - {""})
    out = [
        "",
        "## Families no parity test names",
        "",
        "Generated from `scripts/family_sweep.py`'s rows (run "
        + (", ".join(dates) or "?") + "): every model_type of transformers' AutoModelForCausalLM",
        "mapping that the lists above do not build, with a tiny config made from its config class's defaults",
        "by one generic shrink (no per-family tuning beyond consistency overrides the script lists), run by",
        "`fuselm generate` on prompts of the *prompts* lengths against transformers as above. *stage* says",
        "where a failure stopped: `config` or `transformers` (transformers itself cannot build or run the",
        "tiny config), `fuselm` (capture, load or parity), `crash`/`timeout`. Rows: `scripts/family_sweep_rows.json`",
        "(`scripts/family_sweep.py --resume --json scripts/family_sweep_rows.json` adds new families; this table:",
        "`scripts/models_doc.py --render-only --sweep scripts/family_sweep_rows.json`).",
        "",
        f"{n_pass} of {len(tried)} tried pass; {len(order) - len(tried)} are not a text decoder on their own.",
        "",
        "Failures by mechanism:",
        "",
    ]
    groups: dict[str, list[str]] = {}
    for r in tried:
        if r["status"] == "fail":
            groups.setdefault(mechanism(r), []).append(r["family"])
    for m, fams in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        out.append(f"- {len(fams)}: {m} ({', '.join(fams)})")
    out += [
        "",
        "| family | prompts | result | worst rel. logit diff | stage | first error / reason | date |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in order:
        # Rows come from sweeps run in other checkouts too: their sweep directory, relative.
        err = re.sub(r"\S*/models/sweep/", "models/sweep/", r.get("error") or "").replace("|", "\\|")
        lengths = "/".join(map(str, r.get("lengths", [7, 40]))) if r["status"] != "skip" else ""
        out.append(f"| {r['family']} | {lengths} | {r['status']} | {r.get('worst', '')} | {r.get('stage', '')} | "
                   f"{err} | {r.get('date', '')} |")
    return "\n".join(out) + "\n"


HYBRID_MARKER = "## Hybrid and recurrent families"


def hybrid_section(out: Path) -> str:
    """The section of `out` from HYBRID_MARKER to the next section: the hybrid families' results,
    written by hand from tests/python/test_hybrid_parity.py; kept as it is by every render."""
    text = out.read_text() if out.exists() else ""
    at = text.find(HYBRID_MARKER)
    if at < 0:
        return ""
    end = text.find("\n## ", at + len(HYBRID_MARKER))
    return "\n" + text[at:end if end >= 0 else len(text)].rstrip("\n") + "\n"


REAL_MARKER = "## Real checkpoints, verified"


def kept_real_section(out: Path) -> str:
    """The section of `out` from REAL_MARKER on: the real checkpoints `fuselm verify` passed or
    failed (docs/verify.md), written by hand from its output; kept as it is by every render."""
    text = out.read_text() if out.exists() else ""
    at = text.find(REAL_MARKER)
    return "\n" + text[at:] if at >= 0 else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=REPO / "models" / "parity")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "models.md")
    ap.add_argument("--fuselm", type=Path, default=REPO / "build" / "fuselm")
    ap.add_argument("--only", nargs="*", help="run only these families (the others keep their docs row)")
    ap.add_argument("--lengths", nargs="*", type=int, default=PROMPT_LENGTHS, help="prompt lengths")
    ap.add_argument("--render-only", action="store_true", help="write the doc from the rows of earlier runs")
    ap.add_argument("--sweep", nargs="*", type=Path, default=[],
                    help="scripts/family_sweep.py --json files whose rows form the second table")
    args = ap.parse_args()
    args.models.mkdir(parents=True, exist_ok=True)
    rows_file = args.models / "rows.json"  # rows of earlier runs, so --only updates in place
    known = json.loads(rows_file.read_text()) if rows_file.exists() else {}
    kinds = {}
    for key, family, kind, module in families():
        kinds[key] = (config_class(module, family), kind)
        if not args.render_only and (args.only is None or key in args.only):
            known[key] = run_family(args.fuselm, args.models, key, family, module, args.lengths)
            rows_file.write_text(json.dumps(known, indent=1))
    sweep: dict = {}
    for f in args.sweep:
        sweep.update(json.loads(f.read_text()))
    kept = kept_real_section(args.out)
    args.out.write_text(render(rows_of(known, kinds), kinds) + WRAPPERS_SECTION + hybrid_section(args.out)
                        + (render_sweep(sweep) if sweep else "")
                        + kept)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
