#pragma once
// The captured graph as the engine holds it: nodes in topological order, each with its op,
// schema-normalized arguments, output metadata and module stack (docs/ir.md is the contract).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace fuselm::ir {

/// One argument of a node: a literal, a reference to another node's value, a symbolic int
/// expression over the graph's shape symbols, or a list of arguments.
struct Arg {
  enum class Kind { none, boolean, integer, real, string, ref, sym, dtype, device, list };
  Kind kind = Kind::none;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;  // string literal, symbolic expression (sym), device or layout name
  int ref = -1;   // node index for Kind::ref
  DType dtype = DType::f32;
  std::vector<Arg> list;

  bool is_none() const { return kind == Kind::none; }
};

/// A dimension: a number, or a symbolic expression such as "s0" (the token count).
struct Dim {
  int64_t value = 0;
  std::string expr;  // empty when static
  bool symbolic() const { return !expr.empty(); }
};

struct TensorMeta {
  DType dtype = DType::f32;
  std::vector<Dim> shape;
};

struct Node {
  enum class Out { tensor, tuple, scalar, none };
  int index = 0;
  std::string name;
  std::string op;  // "placeholder", "aten.linear.default", "fuselm.attention.default", "getitem", ...
  std::vector<Arg> args;
  Out out_kind = Out::none;
  TensorMeta out;                 // Out::tensor
  std::vector<TensorMeta> outs;   // Out::tuple
  std::vector<int> module_stack;  // indices into Graph::modules, outermost first
  // Placeholders only: "input" | "parameter" | "constant", and the model-side name.
  std::string placeholder_kind;
  std::string target;
};

struct Module {
  std::string path;   // e.g. "model.layers.0.self_attn" (printed, never matched on)
  std::string cls;    // fully qualified Python class name
  nlohmann::json attributes;  // scalar attributes, e.g. {"layer_idx": 0}
};

struct Graph {
  int version = 0;
  std::string capture_version;
  std::vector<Node> nodes;
  std::vector<Module> modules;
  std::map<std::string, std::vector<std::string>> op_args;  // op -> schema argument names
  nlohmann::json parameters;  // target -> {shape, dtype, checkpoint{...}}
  nlohmann::json constants;   // target -> {shape, dtype}
  nlohmann::json model;       // class, config_json, max_position_embeddings, vocab_size
  std::vector<int> outputs;   // node indices of the user outputs
  std::map<std::string, int> index_by_name;

  const Node& node(const std::string& name) const { return nodes.at(index_by_name.at(name)); }
  /// Index of argument `name` in op's schema, or -1.
  int arg_index(const std::string& op, std::string_view name) const;
};

}  // namespace fuselm::ir
