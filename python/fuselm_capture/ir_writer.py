"""Serialize a torch.export ExportedProgram into fuselm's IR (docs/ir.md).

Everything the engine needs is written explicitly: ops with schema-normalized arguments (defaults
filled in), each node's output dtype and symbolic shape, its module stack, the modules' scalar
attributes, parameters with their checkpoint tensors, and recomputed constants.
"""
from __future__ import annotations

import math
import operator
from collections import OrderedDict

import sympy
import torch
from torch.export.graph_signature import InputKind, OutputKind

from . import CAPTURE_VERSION, IR_FORMAT, IR_VERSION

# Pure checks that torch.export leaves in the graph; they compute nothing.
DROPPED_OPS = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default",
    "aten._assert_async.msg",
}

DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "bool", torch.complex64: "c64",
}


def dtype_name(dtype: torch.dtype) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype} has no IR name")
    return DTYPES[dtype]


def op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # e.g. aten.linear.default, fuselm.attention.default
    if target is operator.getitem:
        return "getitem"
    module = getattr(target, "__module__", "") or ""
    name = getattr(target, "__name__", str(target))
    if module in ("_operator", "operator"):
        return f"operator.{name}"
    if module.startswith("torch"):
        return f"torch.{name}"  # sym_float, sym_max, sym_not, ...
    return f"{module}.{name}"


class SymbolNames:
    """Renames torch's shape symbols (s70, s12, ...) to s0, s1, ... in order of first use."""

    def __init__(self):
        self.names: dict[sympy.Symbol, sympy.Symbol] = OrderedDict()

    def expr(self, e) -> str | int:
        e = sympy.sympify(e.node.expr if isinstance(e, torch.SymInt) else e)
        if e.is_Integer:
            return int(e)
        for s in sorted(e.free_symbols, key=str):
            if s not in self.names:
                self.names[s] = sympy.Symbol(f"s{len(self.names)}", integer=True, positive=True)
        return str(e.xreplace(self.names))


class Writer:
    def __init__(self, ep: torch.export.ExportedProgram, modules: dict[str, torch.nn.Module]):
        self.ep = ep
        self.modules = modules
        self.symbols = SymbolNames()
        self.module_index: dict[str, int] = {}
        self.module_table: list[dict] = []
        self.op_table: dict[str, dict] = {}

    # -- values ------------------------------------------------------------------------------
    def value(self, v):
        if isinstance(v, torch.fx.Node):
            return {"ref": v.name}
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            if math.isinf(v) or math.isnan(v):
                return {"float": str(v)}
            return v
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        if isinstance(v, torch.dtype):
            return {"dtype": dtype_name(v)}
        if isinstance(v, torch.device):
            return {"device": v.type}
        if isinstance(v, torch.layout):
            return {"layout": str(v).replace("torch.", "")}
        if isinstance(v, torch.memory_format):
            return {"memory_format": str(v).replace("torch.", "")}
        if isinstance(v, torch.SymInt):
            return {"sym": self.symbols.expr(v)}
        raise ValueError(f"argument of type {type(v).__name__} cannot be written to the IR: {v!r}")

    def meta(self, val) -> dict:
        if isinstance(val, torch.Tensor):
            return {"dtype": dtype_name(val.dtype), "shape": [self.symbols.expr(d) for d in val.shape]}
        if isinstance(val, (list, tuple)):
            return {"outputs": [self.meta(v) for v in val]}
        if isinstance(val, torch.SymInt):
            return {"dtype": "i64", "scalar": self.symbols.expr(val)}
        if isinstance(val, (int, bool)):
            return {"dtype": "bool" if isinstance(val, bool) else "i64", "scalar": int(val)}
        if isinstance(val, (float, torch.SymFloat)):
            return {"dtype": "f64", "scalar": None}
        if val is None:
            return {}
        raise ValueError(f"node value of type {type(val).__name__} cannot be written to the IR")

    # -- modules ------------------------------------------------------------------------------
    def module_id(self, path: str, cls: str) -> int:
        if path not in self.module_index:
            attrs = {}
            mod = self.modules.get(path)
            if mod is not None:
                for k, v in vars(mod).items():
                    if k.startswith("_") or k == "training":
                        continue
                    if isinstance(v, (bool, int, float, str)) and not (isinstance(v, float) and not math.isfinite(v)):
                        attrs[k] = v
            self.module_index[path] = len(self.module_table)
            self.module_table.append({"path": path, "class": cls, "attributes": attrs})
        return self.module_index[path]

    def module_stack(self, node: torch.fx.Node) -> list[int]:
        stack = node.meta.get("nn_module_stack") or {}
        out = []
        for key, (path, cls) in stack.items():
            if key.startswith("_empty_nn_module_stack"):  # torch's placeholder for "no module"
                continue
            cls_name = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
            out.append(self.module_id(path, cls_name))
        return out

    # -- nodes --------------------------------------------------------------------------------
    def call_args(self, node: torch.fx.Node) -> list:
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            schema = target._schema
            name = op_name(target)
            if name not in self.op_table:
                self.op_table[name] = {"schema": str(schema), "args": [a.name for a in schema.arguments]}
            out = []
            for i, a in enumerate(schema.arguments):
                if i < len(node.args):
                    v = node.args[i]
                elif a.name in node.kwargs:
                    v = node.kwargs[a.name]
                elif a.has_default_value():
                    v = a.default_value
                else:
                    v = None
                out.append(self.value(v))
            return out
        if node.kwargs:
            raise ValueError(f"node {node.name} ({op_name(target)}) has keyword arguments")
        return [self.value(a) for a in node.args]

    def write(self, params: dict[str, dict], input_names: dict[str, str]) -> dict:
        sig = self.ep.graph_signature
        kinds = {}
        for spec in sig.input_specs:
            kinds[spec.arg.name] = spec
        nodes = []
        outputs = []
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                spec = kinds[node.name]
                val = node.meta.get("val")
                if not isinstance(val, torch.Tensor) or not node.users:
                    continue
                entry = {"name": node.name, "op": "placeholder"}
                if spec.kind == InputKind.USER_INPUT:
                    entry["kind"] = "input"
                    entry["target"] = input_names.get(node.name, node.name)
                elif spec.kind == InputKind.PARAMETER or (spec.kind == InputKind.BUFFER and spec.persistent):
                    entry["kind"] = "parameter"
                    entry["target"] = spec.target
                else:
                    entry["kind"] = "constant"
                    entry["target"] = spec.target
                entry.update(self.meta(val))
                nodes.append(entry)
            elif node.op == "call_function":
                name = op_name(node.target)
                if name in DROPPED_OPS:
                    continue
                entry = {"name": node.name, "op": name, "args": self.call_args(node)}
                entry.update(self.meta(node.meta.get("val")))
                entry["module_stack"] = self.module_stack(node)
                nodes.append(entry)
            elif node.op == "output":
                user_outputs = [s.arg.name for s in sig.output_specs if s.kind == OutputKind.USER_OUTPUT]
                outputs = [n for n in user_outputs if n is not None]
            else:
                raise ValueError(f"graph node {node.name} has kind {node.op}, which the IR does not carry")
        # Dropped checks may be referenced by nothing else; make sure no reference dangles.
        names = {n["name"] for n in nodes}
        for n in nodes:
            for ref in _refs(n.get("args", [])):
                if ref not in names:
                    raise ValueError(f"node {n['name']} refers to {ref}, which the IR dropped")
        return {
            "format": IR_FORMAT,
            "version": IR_VERSION,
            "capture_version": CAPTURE_VERSION,
            "torch_version": torch.__version__,
            "symbols": {str(new): {"torch": str(old)} for old, new in self.symbols.names.items()},
            "ops": self.op_table,
            "modules": self.module_table,
            "parameters": params,
            "nodes": nodes,
            "outputs": outputs,
        }


def _refs(v):
    if isinstance(v, dict):
        if "ref" in v:
            yield v["ref"]
    elif isinstance(v, list):
        for x in v:
            yield from _refs(x)
