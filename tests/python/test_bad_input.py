"""Bad input gets a one-line error naming the file, tensor, op or field, and a non-zero exit.

Never a crash (signal, abort, uncaught exception, std::terminate), a hang or a Python traceback.

The stderr rule checked for every failing run (see `expect_error`):
  - the exit status is in 1..127 (a signal shows up as a negative returncode, a shell's 128+N);
  - no "Traceback", "terminate called", sanitizer or signal text anywhere in stderr;
  - the LAST non-empty stderr line starts with "fuselm: error:" and is the only such line;
  - every other non-empty line is a progress line ("fuselm: ..." or "fuselm capture: ...") that is
    not itself an error.
One tiny llama, sharded in two files and captured once per module, is copied for every test.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import tiny_models

INDEX = "model.safetensors.index.json"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
VICTIM = "model.layers.0.mlp.up_proj.weight"  # [intermediate 128, hidden 64], float32
TIMEOUT = 300
CRASH_MARKS = ("Traceback", "terminate called", "Segmentation fault", "Aborted", "core dumped",
               "AddressSanitizer", "UndefinedBehaviorSanitizer", "what():")


def run(fuselm_bin: Path, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([str(fuselm_bin), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def gen(fuselm_bin: Path, model_dir: Path | str, *extra: str, ids: str = "1,2,3") -> subprocess.CompletedProcess:
    return run(fuselm_bin, "generate", model_dir, "--prompt-ids", ids, "--max-tokens", "2", "--json", *extra)


def expect_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Checks the one-line-error rule and that the error names every needle; returns the error line."""
    err = proc.stderr
    assert 0 < proc.returncode < 128, f"exit status {proc.returncode}; stderr:\n{err}"
    for mark in CRASH_MARKS:
        assert mark not in err, f"stderr has {mark!r}:\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    last = lines[-1]
    assert last.startswith("fuselm: error: "), f"the last stderr line is not the error:\n{err}"
    assert len(last) > len("fuselm: error: ") + 10, f"empty error message: {last!r}"
    for line in lines[:-1]:
        assert line.startswith(("fuselm: ", "fuselm capture: ")), f"stray stderr line {line!r}:\n{err}"
        assert "error" not in line.lower(), f"more than one error line:\n{err}"
    for needle in needles:
        assert str(needle) in last, f"the error does not name {needle!r}: {last}"
    print(last)
    return last


def rewrite_tensor(model_dir: Path, key: str, fn) -> Path:
    """Replaces tensor `key` in whichever shard holds it by fn(tensor); returns the shard path."""
    shard = model_dir / json.loads((model_dir / INDEX).read_text())["weight_map"][key]
    tensors = load_file(shard)
    tensors[key] = fn(tensors[key]).contiguous()
    save_file(tensors, shard, metadata={"format": "pt"})
    return shard


def edit_ir(model_dir: Path, fn) -> Path:
    ir = model_dir / "fuselm-ir" / "ir.json"
    j = json.loads(ir.read_text())
    fn(j)
    ir.write_text(json.dumps(j))
    return ir


@pytest.fixture(scope="module")
def captured(fuselm_bin, tmp_path_factory) -> Path:
    """A tiny llama in two shards with model.safetensors.index.json, captured once."""
    d = tmp_path_factory.mktemp("bad_input") / "llama"
    tiny_models.build("llama", d)
    tensors = load_file(d / "model.safetensors")
    (d / "model.safetensors").unlink()
    keys = sorted(tensors)
    parts = {SHARDS[0]: keys[: len(keys) // 2], SHARDS[1]: keys[len(keys) // 2:]}
    assert VICTIM in parts[SHARDS[0]] or VICTIM in parts[SHARDS[1]]
    weight_map = {}
    for shard, ks in parts.items():
        save_file({k: tensors[k] for k in ks}, d / shard, metadata={"format": "pt"})
        weight_map.update({k: shard for k in ks})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (d / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    proc = gen(fuselm_bin, d)
    assert proc.returncode == 0, proc.stderr
    assert (d / "fuselm-ir" / "ir.json").exists()
    return d


@pytest.fixture
def model(captured, tmp_path) -> Path:
    dst = tmp_path / "model"
    shutil.copytree(captured, dst)
    return dst


def test_copy_runs(fuselm_bin, model):
    proc = gen(fuselm_bin, model, "--no-capture")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout.splitlines()[-1])["token_ids"]) == 2
    assert "warning" not in proc.stderr, proc.stderr  # every checkpoint tensor is read


# 1. a shard named by the index is missing
def test_missing_shard(fuselm_bin, model):
    (model / SHARDS[1]).unlink()
    expect_error(gen(fuselm_bin, model), SHARDS[1], INDEX)


# 2. a shard cut in half
def test_truncated_shard(fuselm_bin, model):
    shard = model / json.loads((model / INDEX).read_text())["weight_map"][VICTIM]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    line = expect_error(gen(fuselm_bin, model), shard.name, "truncated")
    assert "tensor '" in line, line


# 3. a tensor whose shape disagrees with the IR
def test_shape_mismatch(fuselm_bin, model):
    shard = rewrite_tensor(model, VICTIM, lambda t: t[:120])
    expect_error(gen(fuselm_bin, model), VICTIM, shard.name, "[120, 64]", "[128, 64]")


# 4. a tensor whose dtype disagrees with the IR
def test_dtype_mismatch(fuselm_bin, model):
    shard = rewrite_tensor(model, VICTIM, lambda t: t.to(torch.float16))
    expect_error(gen(fuselm_bin, model), VICTIM, shard.name, "F16", "F32")


# 5. an IR of another version
def test_ir_version_no_capture(fuselm_bin, model):
    edit_ir(model, lambda j: j.update(version=99))
    line = expect_error(gen(fuselm_bin, model, "--no-capture"), "ir.json", "99", "fuselm_capture")
    assert "version" in line, line


def test_ir_version_recaptured(fuselm_bin, model):
    edit_ir(model, lambda j: j.update(version=99))
    proc = gen(fuselm_bin, model)
    assert proc.returncode == 0, proc.stderr
    assert "fuselm: capturing" in proc.stderr
    assert json.loads((model / "fuselm-ir" / "ir.json").read_text())["version"] != 99
    assert len(json.loads(proc.stdout.splitlines()[-1])["token_ids"]) == 2


@pytest.mark.parametrize("version", ['"one"', "null", "1.5"])
def test_ir_version_wrong_type(fuselm_bin, model, version):
    edit_ir(model, lambda j: j.update(version=json.loads(version)))
    expect_error(gen(fuselm_bin, model, "--no-capture"), "ir.json", "version")


# 6. an op the engine lacks
def test_unknown_op(fuselm_bin, model):
    where = {}

    def rename(j):
        node = next(n for n in j["nodes"] if n["op"] == "aten.silu.default" and n.get("module_stack"))
        node["op"] = "aten.frobnicate.default"
        where["module"] = j["modules"][node["module_stack"][-1]]["path"]
        where["node"] = node["name"]

    edit_ir(model, rename)
    expect_error(gen(fuselm_bin, model, "--no-capture"), "aten.frobnicate.default", where["module"], where["node"])


def _first(j, op):
    return next(n for n in j["nodes"] if n["op"] == op and n.get("module_stack"))


def _drop_nodes(j):
    del j["nodes"]


def _outputs_not_names(j):
    j["outputs"] = [7]


def _op_not_a_string(j):
    _first(j, "aten.silu.default")["op"] = 42


def _ref_to_a_later_node(j):
    _first(j, "aten.silu.default")["args"] = [{"ref": "no_such_node"}]


def _cycle(j):
    # silu reads the node that reads silu: a cycle (and a reference to a node that exists, later).
    silu = _first(j, "aten.silu.default")
    user = next(n for n in j["nodes"] if any(isinstance(a, dict) and a.get("ref") == silu["name"] for a in n.get("args", [])))
    silu["args"] = [{"ref": user["name"]}]


def _self_reference(j):
    silu = _first(j, "aten.silu.default")
    silu["args"] = [{"ref": silu["name"]}]


def _module_index_out_of_range(j):
    _first(j, "aten.silu.default")["module_stack"] = [10_000]


def _parameter_not_in_table(j):
    target = next(n["target"] for n in j["nodes"] if n["op"] == "placeholder" and n.get("kind") == "parameter")
    del j["parameters"][target]


def _weight_arg_not_a_tensor(j):
    _first(j, "aten.linear.default")["args"][1] = 5


def _unknown_checkpoint_key(j):
    j["parameters"][next(iter(j["parameters"]))]["checkpoint"]["keys"] = ["no.such.key"]


@pytest.mark.parametrize("edit, needles", [
    (_drop_nodes, ["ir.json", "nodes"]),
    (_outputs_not_names, ["ir.json", "output"]),
    (_op_not_a_string, ["ir.json", "silu"]),
    (_ref_to_a_later_node, ["ir.json", "no_such_node"]),
    (_cycle, ["ir.json", "silu", "not an earlier node"]),
    (_self_reference, ["ir.json", "silu", "not an earlier node"]),
    (_module_index_out_of_range, ["ir.json", "silu", "10000"]),
    (_parameter_not_in_table, ["ir.json", "parameter"]),
    (_weight_arg_not_a_tensor, ["linear", "model.layers.0"]),
    (_unknown_checkpoint_key, ["no.such.key"]),
], ids=lambda x: getattr(x, "__name__", "")[1:] if callable(x) else "")
def test_ir_inconsistent(fuselm_bin, model, edit, needles):
    edit_ir(model, edit)
    expect_error(gen(fuselm_bin, model, "--no-capture"), *needles)


def test_missing_constants_file(fuselm_bin, model):
    const = model / "fuselm-ir" / "constants.safetensors"
    const.unlink()
    expect_error(gen(fuselm_bin, model, "--no-capture"), str(const))


# 7. a prompt longer than the context; token ids outside the vocabulary
def test_prompt_longer_than_context(fuselm_bin, model):
    ids = ",".join(str(i % 500) for i in range(1100))
    expect_error(gen(fuselm_bin, model, ids=ids), "1100", "1024")


@pytest.mark.parametrize("bad_id", ["512", "100000", "-1"])
def test_token_outside_vocabulary(fuselm_bin, model, bad_id):
    expect_error(gen(fuselm_bin, model, ids=f"1,{bad_id},3"), bad_id, "511")


# Fail closed: a record without a context length or with no vocabulary size is an error that says
# what to do, never a default (2048 tokens) or an unchecked token id.
@pytest.mark.parametrize("field, value, needles", [
    ("max_position_embeddings", None, ["max_position_embeddings", "config.json", "re-capture"]),
    ("vocab_size", 0, ["vocab_size", "is 0", "config.json"]),
    ("vocab_size", None, ["vocab_size", "config.json", "re-capture"]),
], ids=["no_context", "vocab_zero", "no_vocab"])
def test_model_record_fails_closed(fuselm_bin, model, field, value, needles):
    def edit(j):
        if value is None:
            del j["model"][field]
        else:
            j["model"][field] = value

    edit_ir(model, edit)
    expect_error(gen(fuselm_bin, model, "--no-capture"), "ir.json", *needles)


def test_fuselm_op_schema_mismatch(fuselm_bin, model):
    """An IR whose fuselm op names other arguments than the engine's op table is refused."""
    def edit(j):
        j["ops"]["fuselm.attention.default"]["args"][7] = "layer"

    edit_ir(model, edit)
    expect_error(gen(fuselm_bin, model, "--no-capture"), "fuselm.attention.default", "layer_idx", "re-run capture")


# 8. malformed ir.json
def test_truncated_ir_json(fuselm_bin, model):
    ir = model / "fuselm-ir" / "ir.json"
    text = ir.read_text()
    ir.write_text(text[: len(text) // 2])
    expect_error(gen(fuselm_bin, model, "--no-capture"), str(ir))


@pytest.mark.parametrize("content", ["[]", '"fuselm-ir"', '{"format": "fuselm-ir", "version": 1}'])
def test_ir_json_wrong_shape(fuselm_bin, model, content):
    ir = model / "fuselm-ir" / "ir.json"
    ir.write_text(content)
    expect_error(gen(fuselm_bin, model, "--no-capture"), "ir.json")


# 9. a directory that is not a model, a directory that does not exist
def test_model_dir_without_config(fuselm_bin, model):
    (model / "config.json").unlink()
    expect_error(gen(fuselm_bin, model), str(model), "config.json")


def test_model_dir_missing(fuselm_bin, tmp_path):
    missing = tmp_path / "no-such-model"
    expect_error(gen(fuselm_bin, missing), str(missing))


def test_model_dir_is_a_file(fuselm_bin, tmp_path):
    f = tmp_path / "model.txt"
    f.write_text("hello")
    expect_error(gen(fuselm_bin, f), str(f))


# 10. bad command-line values
@pytest.mark.parametrize("args, needle", [
    (["--temperature", "-1"], "--temperature"),
    (["--top-p", "0"], "--top-p"),
    (["--top-p", "1.5"], "--top-p"),
    (["--max-tokens", "0"], "--max-tokens"),
    (["--top-k", "-3"], "--top-k"),
    (["--dtype", "f64"], "--dtype"),
    (["--frobnicate"], "--frobnicate"),
    (["--temperature", "nan"], "--temperature"),
    (["--top-p", "nan"], "--top-p"),
    (["--max-context", "-5"], "--max-context"),
    (["--max-context", "100000000000"], "100000000000"),
    (["--max-tokens", "x"], "--max-tokens"),
])
def test_bad_cli_values(fuselm_bin, model, args, needle):
    expect_error(gen(fuselm_bin, model, *args), needle)


@pytest.mark.parametrize("ids, needle", [("1,x,3", "'x'"), ("1,,3", "''"), ("1,2.5", "'2.5'"), ("", "empty")])
def test_bad_prompt_ids(fuselm_bin, model, ids, needle):
    line = expect_error(gen(fuselm_bin, model, ids=ids), needle)
    assert "--prompt-ids" in line or "prompt" in line, line


def test_bad_prompt_ids_fail_before_loading(fuselm_bin, tmp_path):
    # The ids are checked before the model is touched: no model needed to see the error.
    expect_error(gen(fuselm_bin, tmp_path / "absent", ids="1,x,3"), "--prompt-ids", "'x'")


def test_no_prompt(fuselm_bin, model):
    expect_error(run(fuselm_bin, "generate", model, "--max-tokens", "2"), "--prompt")


def test_no_subcommand(fuselm_bin):
    expect_error(run(fuselm_bin))


def test_unknown_subcommand(fuselm_bin):
    expect_error(run(fuselm_bin, "bogus"), "'bogus'", "generate")


def test_help_is_not_an_error(fuselm_bin):
    proc = run(fuselm_bin, "generate", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--prompt-ids" in proc.stdout


# 11. capture fails: an architecture transformers does not know
def test_capture_unknown_architecture(fuselm_bin, model):
    shutil.rmtree(model / "fuselm-ir")
    cfg = json.loads((model / "config.json").read_text())
    cfg["model_type"] = "nosuchmodel"
    cfg["architectures"] = ["NoSuchModelForCausalLM"]
    (model / "config.json").write_text(json.dumps(cfg))
    line = expect_error(gen(fuselm_bin, model), "capture", "nosuchmodel")
    assert "failed" in line, line


def test_capture_missing_shard(fuselm_bin, model):
    shutil.rmtree(model / "fuselm-ir")
    (model / SHARDS[1]).unlink()
    line = expect_error(gen(fuselm_bin, model), "capture", SHARDS[1])
    assert "failed" in line, line


def test_capture_bad_config_json(fuselm_bin, model):
    shutil.rmtree(model / "fuselm-ir")
    (model / "config.json").write_text("{not json")
    expect_error(gen(fuselm_bin, model), "capture", "config.json")


def test_stale_config_no_capture(fuselm_bin, model):
    cfg = json.loads((model / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-3
    (model / "config.json").write_text(json.dumps(cfg))
    expect_error(gen(fuselm_bin, model, "--no-capture"), "config.json", "fuselm_capture")


# 12. checkpoint tensors no graph parameter reads
def _fewer_layers(model: Path, n: int) -> None:
    cfg = json.loads((model / "config.json").read_text())
    cfg["num_hidden_layers"] = n
    (model / "config.json").write_text(json.dumps(cfg))


def test_fewer_layers_than_checkpoint(fuselm_bin, model):
    # The checkpoint has layers 0..2; a config.json of 2 layers captures and would run 2 of 3.
    _fewer_layers(model, 2)
    line = expect_error(gen(fuselm_bin, model), "--allow-unused-weights", "model.layers.2.", "model.layers.1.")
    n_layer = sum(1 for k in json.loads((model / INDEX).read_text())["weight_map"] if k.startswith("model.layers.2."))
    assert f"{n_layer} checkpoint tensors" in line, line


def test_fewer_layers_allowed(fuselm_bin, model):
    _fewer_layers(model, 2)
    proc = gen(fuselm_bin, model, "--allow-unused-weights")
    assert proc.returncode == 0, proc.stderr
    warning = next(line for line in proc.stderr.splitlines() if line.startswith("fuselm: warning:"))
    n_layer = sum(1 for k in json.loads((model / INDEX).read_text())["weight_map"] if k.startswith("model.layers.2."))
    assert f"{n_layer} checkpoint tensors are read by no graph parameter" in warning, warning
    assert "model.layers.2." in warning, warning


def test_unread_tensor_is_reported(fuselm_bin, model):
    # An extra tensor that is no missing layer: a warning naming it, and the run goes on.
    rewrite_tensor(model, VICTIM, lambda t: t)
    shard = model / json.loads((model / INDEX).read_text())["weight_map"][VICTIM]
    tensors = load_file(shard)
    tensors["extra.unread_buffer"] = torch.zeros(3)
    save_file(tensors, shard, metadata={"format": "pt"})
    index = json.loads((model / INDEX).read_text())
    index["weight_map"]["extra.unread_buffer"] = shard.name
    (model / INDEX).write_text(json.dumps(index))
    proc = gen(fuselm_bin, model, "--no-capture")
    assert proc.returncode == 0, proc.stderr
    assert "fuselm: warning:" in proc.stderr and "1 checkpoint tensors" in proc.stderr, proc.stderr
    assert "extra.unread_buffer" in proc.stderr, proc.stderr


# 13. the IR is keyed on the parsed config.json, not its bytes
def test_config_reformatted_keeps_the_ir(fuselm_bin, model):
    cfg = json.loads((model / "config.json").read_text())
    reordered = dict(reversed(list(cfg.items())))
    (model / "config.json").write_text(json.dumps(reordered, indent=4) + "\n\n")
    proc = gen(fuselm_bin, model, "--no-capture")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout.splitlines()[-1])["token_ids"]) == 2


# 14. what the CLI says
def test_prompt_ids_without_tokenizer_prints_the_ids(fuselm_bin, model):
    assert not (model / "tokenizer.json").exists()
    plain = run(fuselm_bin, "generate", model, "--prompt-ids", "1,2,3", "--max-tokens", "3", "--no-capture")
    assert plain.returncode == 0, plain.stderr
    as_json = run(fuselm_bin, "generate", model, "--prompt-ids", "1,2,3", "--max-tokens", "3", "--no-capture", "--json")
    assert as_json.returncode == 0, as_json.stderr
    ids = json.loads(as_json.stdout.splitlines()[-1])["token_ids"]
    assert plain.stdout == ",".join(map(str, ids)) + "\n"


def test_max_context_too_small_names_the_flag(fuselm_bin, model):
    proc = run(fuselm_bin, "generate", model, "--prompt-ids", "1,2,3,4", "--max-tokens", "30", "--max-context", "2",
               "--no-capture")
    expect_error(proc, "--max-context 2", "--max-tokens 30", "34")
    assert proc.stdout == ""


def test_config_disagrees_with_the_checkpoint(fuselm_bin, model):
    # A vocabulary size the checkpoint does not have: capture follows config.json, the checkpoint
    # is as it was; re-capturing is not the way out.
    cfg = json.loads((model / "config.json").read_text())
    cfg["vocab_size"] = 600
    (model / "config.json").write_text(json.dumps(cfg))
    line = expect_error(gen(fuselm_bin, model), "config.json disagrees with the checkpoint", "[600, 64]", "[512, 64]")
    assert "re-run capture" not in line, line


def test_checkpoint_changed_since_capture_says_recapture(fuselm_bin, model):
    shard = rewrite_tensor(model, VICTIM, lambda t: t[:120])
    line = expect_error(gen(fuselm_bin, model, "--no-capture"), shard.name, "re-run capture")
    assert "disagrees" not in line, line


def test_hidden_size_message_keeps_its_reason(fuselm_bin, model):
    # transformers' validator puts the reason on the line after "... 'validate_architecture':"
    cfg = json.loads((model / "config.json").read_text())
    cfg["hidden_size"] = 30  # 4 heads do not divide it
    (model / "config.json").write_text(json.dumps(cfg))
    line = expect_error(gen(fuselm_bin, model), "capture", "hidden size (30)", "attention heads (4)")
    assert not line.rstrip().endswith(":"), line


# 15. JSON nested 100,000 deep: an error naming the file, no stack overflow
DEEP = "[" * 100_000 + "]" * 100_000


def test_deep_ir_json(fuselm_bin, model):
    ir = model / "fuselm-ir" / "ir.json"
    j = json.loads(ir.read_text())
    text = json.dumps(j).replace('"outputs": [', '"outputs": [' + DEEP + ", ", 1)
    ir.write_text(text)
    expect_error(gen(fuselm_bin, model, "--no-capture"), "ir.json", "nested deeper than")


def test_deep_config_json(fuselm_bin, model):
    (model / "config.json").write_text('{"model_type": "llama", "deep": ' + DEEP + "}")
    expect_error(gen(fuselm_bin, model), "config.json")


def test_deep_safetensors_header(fuselm_bin, model):
    shard = model / SHARDS[0]
    header = ('{"x": ' + DEEP + "}").encode()
    shard.write_bytes(len(header).to_bytes(8, "little") + header)
    expect_error(gen(fuselm_bin, model, "--no-capture"), shard.name, "nested deeper than")
