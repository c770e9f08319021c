#include "ir/load.h"

#include "base/json_limited.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ir/op_defs.h"

namespace fuselm::ir {
namespace {

using nlohmann::json;

struct Parser {
  const std::string file;
  const std::map<std::string, int>& index_by_name;
  std::string node_name;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(fmt::format("{}: node '{}': {}", file, node_name, what));
  }

  Arg arg(const json& v) const {
    Arg a;
    if (v.is_null()) {
      a.kind = Arg::Kind::none;
    } else if (v.is_boolean()) {
      a.kind = Arg::Kind::boolean;
      a.b = v.get<bool>();
    } else if (v.is_number_integer()) {
      a.kind = Arg::Kind::integer;
      a.i = v.get<int64_t>();
    } else if (v.is_number_float()) {
      a.kind = Arg::Kind::real;
      a.f = v.get<double>();
    } else if (v.is_string()) {
      a.kind = Arg::Kind::string;
      a.s = v.get<std::string>();
    } else if (v.is_array()) {
      a.kind = Arg::Kind::list;
      for (const auto& x : v) a.list.push_back(arg(x));
    } else if (v.is_object()) {
      if (v.contains("ref")) {
        a.kind = Arg::Kind::ref;
        auto name = v["ref"].get<std::string>();
        auto it = index_by_name.find(name);
        if (it == index_by_name.end()) fail("refers to '" + name + "', which is not an earlier node");
        a.ref = it->second;
      } else if (v.contains("sym")) {
        const auto& e = v["sym"];
        if (e.is_number_integer()) {
          a.kind = Arg::Kind::integer;
          a.i = e.get<int64_t>();
        } else {
          a.kind = Arg::Kind::sym;
          a.s = e.get<std::string>();
        }
      } else if (v.contains("float")) {
        a.kind = Arg::Kind::real;
        auto s = v["float"].get<std::string>();
        a.f = s == "inf" ? INFINITY : s == "-inf" ? -INFINITY : NAN;
      } else if (v.contains("dtype")) {
        a.kind = Arg::Kind::dtype;
        a.dtype = parse_dtype(v["dtype"].get<std::string>());
      } else if (v.contains("device") || v.contains("layout") || v.contains("memory_format")) {
        a.kind = Arg::Kind::device;  // placement and layout carry no meaning on one CPU
        a.s = v.begin().value().get<std::string>();
      } else {
        fail("argument " + v.dump() + " has no known form");
      }
    } else {
      fail("argument " + v.dump() + " has no known form");
    }
    return a;
  }

  TensorMeta meta(const json& j) const {
    TensorMeta m;
    m.dtype = parse_dtype(j.at("dtype").get<std::string>());
    for (const auto& d : j.at("shape")) {
      Dim dim;
      if (d.is_number_integer()) {
        dim.value = d.get<int64_t>();
      } else {
        dim.expr = d.get<std::string>();
      }
      m.shape.push_back(dim);
    }
    return m;
  }
};

// A fuselm op's schema in the IR must name the arguments this engine reads by name (op_defs.cc):
// an IR from another capture version would otherwise be read at the wrong positions.
void check_op_schema(const std::string& op, const std::vector<std::string>& args) {
  const OpDef* def = find_op_def(op);
  if (!def) return;
  bool same = def->args.size() == args.size();
  for (size_t i = 0; same && i < args.size(); ++i) same = def->args[i] == args[i];
  if (!same)
    throw std::runtime_error(fmt::format("op {} has arguments [{}] but this engine defines [{}]; re-run capture", op,
                                         fmt::join(args, ", "), fmt::join(def->args, ", ")));
}

// An argument only capture fills (a sparse attention's key selection, proved to be every key and
// removed) must be none here: the engine would otherwise run the op over keys the model skips.
void check_capture_only_args(const Node& n, const Parser& p) {
  const OpDef* def = find_op_def(n.op);
  if (!def) return;
  for (std::string_view name : def->none_in_ir) {
    const size_t i = def->arg(name);
    if (i < n.args.size() && !n.args[i].is_none())
      p.fail(fmt::format("{} has a value for {}, which only capture may hold (it proves a sparse attention's key "
                         "selection to be every key and removes it); re-run capture",
                         n.op, name));
  }
}

}  // namespace

int Graph::arg_index(const std::string& op, std::string_view name) const {
  auto it = op_args.find(op);
  if (it == op_args.end()) return -1;
  for (size_t i = 0; i < it->second.size(); ++i)
    if (it->second[i] == name) return static_cast<int>(i);
  return -1;
}

Graph load(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path);
  if (!in) throw std::runtime_error(file + ": cannot open the IR (run capture first)");
  json j;
  try {
    j = base::parse_json_limited(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(file + ": malformed IR JSON: " + e.what());
  } catch (const base::JsonTooDeep& e) {
    throw std::runtime_error(file + ": malformed IR JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != "fuselm-ir")
    throw std::runtime_error(file + ": not a fuselm IR file (field 'format' is not 'fuselm-ir')");
  Graph g;
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kIrVersion)
    throw std::runtime_error(fmt::format(
        "{}: IR version {} but this engine reads version {}; re-run capture to rewrite it", file,
        j.contains("version") ? j["version"].dump() : "(none)", kIrVersion));
  g.version = kIrVersion;
  try {
    g.capture_version = j.value("capture_version", "");
    for (const auto& [op, schema] : j.at("ops").items()) {
      g.op_args[op] = schema.at("args").get<std::vector<std::string>>();
      check_op_schema(op, g.op_args[op]);
    }
    for (const auto& m : j.at("modules"))
      g.modules.push_back({m.at("path").get<std::string>(), m.at("class").get<std::string>(),
                           m.value("attributes", json::object())});
    g.parameters = j.at("parameters");
    g.constants = j.value("constants", json::object());
    g.model = j.value("model", json::object());
    if (!g.model.is_object()) throw std::runtime_error("field 'model' is not an object");
    if (!g.parameters.is_object()) throw std::runtime_error("field 'parameters' is not an object");
    if (!g.constants.is_object()) throw std::runtime_error("field 'constants' is not an object");
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(file + ": malformed IR header: " + e.what());
  } catch (const json::exception& e) {
    throw std::runtime_error(file + ": malformed IR header: " + e.what());
  }

  if (!j.contains("nodes") || !j["nodes"].is_array())
    throw std::runtime_error(file + ": malformed IR: no 'nodes' list");
  if (!j.contains("outputs") || !j["outputs"].is_array())
    throw std::runtime_error(file + ": malformed IR: no 'outputs' list");
  Parser p{file, g.index_by_name, ""};
  const auto& nodes = j["nodes"];
  g.nodes.reserve(nodes.size());
  for (const auto& jn : nodes) {
    Node n;
    n.index = static_cast<int>(g.nodes.size());
    try {
      n.name = jn.at("name").get<std::string>();
      p.node_name = n.name;
      n.op = jn.at("op").get<std::string>();
      if (g.index_by_name.count(n.name)) p.fail("defined twice");
      if (n.op == "placeholder") {
        n.placeholder_kind = jn.at("kind").get<std::string>();
        n.target = jn.at("target").get<std::string>();
      }
      for (const auto& a : jn.value("args", json::array())) n.args.push_back(p.arg(a));
      check_capture_only_args(n, p);
      if (jn.contains("outputs")) {
        n.out_kind = Node::Out::tuple;
        for (const auto& o : jn["outputs"]) n.outs.push_back(p.meta(o));
      } else if (jn.contains("shape")) {
        n.out_kind = Node::Out::tensor;
        n.out = p.meta(jn);
      } else if (jn.contains("scalar")) {
        n.out_kind = Node::Out::scalar;
      }
      for (const auto& m : jn.value("module_stack", json::array())) n.module_stack.push_back(m.get<int>());
    } catch (const json::exception& e) {
      p.fail(std::string("malformed: ") + e.what());
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()).rfind(file, 0) == 0) throw;
      p.fail(e.what());
    }
    g.index_by_name[n.name] = n.index;
    g.nodes.push_back(std::move(n));
  }
  for (const auto& o : j["outputs"]) {
    if (!o.is_string()) throw std::runtime_error(file + ": output " + o.dump() + " is not a node name");
    auto name = o.get<std::string>();
    auto it = g.index_by_name.find(name);
    if (it == g.index_by_name.end()) throw std::runtime_error(file + ": output '" + name + "' is not a node");
    g.outputs.push_back(it->second);
  }
  try {
    verify(g);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(file + ": " + e.what());
  }
  return g;
}

void verify(const Graph& g) {
  for (const auto& n : g.nodes) {
    for (int m : n.module_stack)
      if (m < 0 || m >= static_cast<int>(g.modules.size()))
        throw std::runtime_error(fmt::format("IR node '{}': module index {} out of range", n.name, m));
    if (n.op == "placeholder" && n.placeholder_kind == "parameter" && !g.parameters.contains(n.target))
      throw std::runtime_error(fmt::format("IR node '{}': parameter '{}' missing from the parameter table",
                                           n.name, n.target));
    if (n.op == "placeholder" && n.placeholder_kind == "constant" && !g.constants.contains(n.target))
      throw std::runtime_error(fmt::format("IR node '{}': constant '{}' missing from the constant table",
                                           n.name, n.target));
  }
  if (g.outputs.empty()) throw std::runtime_error("IR has no outputs");
}

}  // namespace fuselm::ir
