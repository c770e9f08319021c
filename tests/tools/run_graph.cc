// fuselm_run_graph: runs captured graphs on given inputs, for the op tests against torch
// (tests/python/test_ops_torch.py, test_recurrent_ops.py). Not part of the engine: it loads an IR
// with ir::load, binds its inputs from a safetensors file and runs runtime::Executor, with no
// fusers, no weights and no KV cache, so what is checked is one op of the generic interpreter as
// capture wrote it. A graph with stateful ops (docs/recurrent.md) runs as one sequence owning slot
// 0 of a StateCache sized by the ops' state_size.
//
//   fuselm_run_graph --list-ops          every op of OpRegistry::builtin(), one a line
//   fuselm_run_graph [--chunk N] CASES_DIR
//                                        for each CASES_DIR/<case>/ holding fuselm-ir/ir.json and
//                                        inputs.safetensors (tensors named by the graph's input
//                                        targets), writes outputs.safetensors (out0, out1, ... one
//                                        per graph output) or error.txt (the one-line error).
//   --chunk N (or a file <case>/chunk.txt holding N): feeds the tokens in consecutive chunks of N
//   (the last one shorter), the recurrent state carried from chunk to chunk, and writes the
//   outputs joined back. The token dim of an input or output is its dim of the first symbolic
//   size of the inputs (the capture must mark the token count dynamic).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/load.h"
#include "ir/op_defs.h"
#include "kv/state_cache.h"
#include "runtime/executor.h"
#include "runtime/op_registry.h"
#include "weights/file_dtype.h"
#include "weights/safetensors.h"

namespace fs = std::filesystem;
using fuselm::runtime::Tensor;

namespace {

std::string file_dtype_of(fuselm::ir::DType d) {
  const std::string name(fuselm::weights::file_dtype_name(d));
  if (name == "?" || fuselm::is_raw(d))
    throw std::runtime_error("an output of dtype " + std::string(fuselm::ir::dtype_name(d)) + " cannot be written");
  return name;
}

/// The tensor's elements in row-major order (any strides), as bytes.
std::vector<char> dense_bytes(const Tensor& t) {
  const int64_t esize = fuselm::ir::dtype_size(t.dtype), n = t.numel();
  std::vector<char> out(static_cast<size_t>(n * esize));
  std::vector<int64_t> idx(t.ndim, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d) off += idx[d] * t.strides[d];
    std::memcpy(out.data() + i * esize, static_cast<const char*>(t.data) + off * esize, esize);
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

/// Writes tensors (name -> dtype, shape, bytes) as a safetensors file.
void write_safetensors(const fs::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<std::vector<char>> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    data.push_back(dense_bytes(t));
    header[name] = {{"dtype", file_dtype_of(t.dtype)},
                    {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.ndim)},
                    {"data_offsets", {offset, offset + data.back().size()}}};
    offset += data.back().size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& d : data) out.write(d.data(), static_cast<std::streamsize>(d.size()));
  if (!out) throw std::runtime_error(path.string() + ": cannot write");
}

std::map<std::string, Tensor> tensors_of(const fuselm::weights::SafetensorsFile& f) {
  std::map<std::string, Tensor> m;
  for (const auto& [name, info] : f.tensors()) {
    if (fuselm::is_raw(info.dtype))
      throw std::runtime_error(f.path().string() + ": tensor " + name + " has a dtype the engine lacks");
    m[name] = Tensor::contiguous_view(const_cast<std::byte*>(info.bytes.data()), info.dtype, info.shape);
  }
  return m;
}

/// The state sizes of the graph's stateful ops, indexed by their state_idx (empty: none).
std::vector<int64_t> state_sizes(const fuselm::ir::Graph& g) {
  std::vector<int64_t> sizes;
  for (const auto& n : g.nodes) {
    const fuselm::ir::OpDef* d = fuselm::ir::find_op_def(n.op);
    if (!d || d->state.empty()) continue;
    const size_t i = d->arg(d->state);
    if (i >= n.args.size() || n.args[i].kind != fuselm::ir::Arg::Kind::integer || n.args[i].i < 0)
      throw std::runtime_error(n.op + ": the state index is not a literal integer");
    std::string error;
    const int64_t floats = d->state_size(g, n, error);
    if (floats <= 0) throw std::runtime_error(error);
    const auto idx = static_cast<size_t>(n.args[i].i);
    if (sizes.size() <= idx) sizes.resize(idx + 1, 0);
    if (sizes[idx] && sizes[idx] != floats) throw std::runtime_error(n.op + ": two ops share a state index");
    sizes[idx] = floats;
  }
  for (auto& s : sizes) s = s ? s : 1;  // an index no op uses
  return sizes;
}

/// The first symbolic size of the graph's inputs ("" when none): the token count a chunked run
/// splits.
std::string token_symbol(const fuselm::ir::Graph& g) {
  for (const auto& n : g.nodes)
    if (n.op == "placeholder" && n.placeholder_kind == "input")
      for (const auto& d : n.out.shape)
        if (d.symbolic()) return d.expr;
  return "";
}

/// The dim of `meta` whose size is `symbol`, or -1.
int token_dim(const fuselm::ir::TensorMeta& meta, const std::string& symbol) {
  for (size_t d = 0; d < meta.shape.size(); ++d)
    if (meta.shape[d].expr == symbol) return static_cast<int>(d);
  return -1;
}

/// t's slice [start, start + len) along dim d (-1: t itself).
Tensor slice(const Tensor& t, int d, int64_t start, int64_t len) {
  if (d < 0) return t;
  Tensor s = t;
  s.data = static_cast<char*>(t.data) + start * t.strides[d] * fuselm::ir::dtype_size(t.dtype);
  s.shape[d] = len;
  return s;
}

/// Appends chunk (dense bytes of `part`, its token dim d) into `whole`, whose dim d grows.
void append_chunk(std::vector<char>& whole, Tensor& whole_meta, const Tensor& part, int d, bool first) {
  const std::vector<char> bytes = dense_bytes(part);
  if (first || d < 0) {
    whole = bytes;
    whole_meta = part;
    return;
  }
  const int64_t esize = fuselm::ir::dtype_size(part.dtype);
  int64_t outer = 1, inner = esize;
  for (int i = 0; i < d; ++i) outer *= part.shape[i];
  for (int i = d + 1; i < part.ndim; ++i) inner *= part.shape[i];
  const int64_t have = whole_meta.shape[d], add = part.shape[d];
  std::vector<char> joined(static_cast<size_t>(outer * (have + add) * inner));
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(joined.data() + o * (have + add) * inner, whole.data() + o * have * inner, have * inner);
    std::memcpy(joined.data() + (o * (have + add) + have) * inner, bytes.data() + o * add * inner, add * inner);
  }
  whole = std::move(joined);
  whole_meta.shape[d] = have + add;
}

/// Runs one case directory; every output k comes from a run whose first output is k. chunk > 0:
/// the tokens in consecutive chunks of that many, one sequence whose state is carried.
void run_case(const fs::path& dir, int64_t chunk) {
  fuselm::ir::Graph graph = fuselm::ir::load(dir / "fuselm-ir" / "ir.json");
  if (fs::exists(dir / "chunk.txt")) std::ifstream(dir / "chunk.txt") >> chunk;
  auto inputs_file = fuselm::weights::SafetensorsFile::open(dir / "inputs.safetensors");
  auto inputs = tensors_of(inputs_file);
  std::optional<fuselm::weights::SafetensorsFile> constants_file;
  std::map<std::string, Tensor> constants;
  if (!graph.constants.empty()) {
    constants_file.emplace(fuselm::weights::SafetensorsFile::open(dir / "fuselm-ir" / "constants.safetensors"));
    constants = tensors_of(*constants_file);
  }
  const std::vector<int64_t> sizes = state_sizes(graph);
  std::optional<fuselm::kv::StateCache> states;
  if (!sizes.empty()) states.emplace(sizes, 1);
  const std::string symbol = token_symbol(graph);
  if (chunk > 0 && symbol.empty()) throw std::runtime_error("a chunked run needs a symbolic token count in the inputs");
  const std::vector<int> outputs = graph.outputs;
  std::vector<std::pair<std::string, Tensor>> results;
  std::vector<std::vector<char>> keep(outputs.size());  // each output's bytes, joined over the chunks
  std::vector<fuselm::ir::Graph> graphs;
  graphs.reserve(outputs.size());
  std::vector<std::unique_ptr<fuselm::runtime::Executor>> executors;
  for (size_t k = 0; k < outputs.size(); ++k) {
    graphs.push_back(graph);
    graphs.back().outputs = {outputs[k]};
    executors.push_back(std::make_unique<fuselm::runtime::Executor>(graphs.back(), std::map<std::string, Tensor>{},
                                                                     constants));
    std::vector<Tensor> in;
    std::vector<int> dims;
    int64_t tokens = 0;
    for (const auto& target : executors.back()->input_targets()) {
      auto it = inputs.find(target);
      if (it == inputs.end()) throw std::runtime_error("inputs.safetensors has no tensor " + target);
      in.push_back(it->second);
      int dim = -1;
      for (const auto& n : graph.nodes)
        if (!symbol.empty() && n.op == "placeholder" && n.target == target) dim = token_dim(n.out, symbol);
      dims.push_back(dim);
      if (dims.back() >= 0) tokens = it->second.shape[dims.back()];
    }
    const int out_dim = symbol.empty() ? -1 : token_dim(graph.nodes[outputs[k]].out, symbol);
    const int64_t step = chunk > 0 ? chunk : std::max<int64_t>(tokens, 1);
    Tensor meta;
    for (int64_t start = 0; start == 0 || start < tokens; start += step) {
      const int64_t len = std::min(step, tokens - start);
      std::vector<Tensor> part;
      for (size_t i = 0; i < in.size(); ++i) part.push_back(slice(in[i], dims[i], start, len));
      const fuselm::runtime::SequenceSlice seq{0, len, start + len, nullptr, 0};
      fuselm::runtime::Batch batch;
      batch.sequences = {&seq, 1};
      batch.state = states ? &*states : nullptr;
      const Tensor& out = executors.back()->run(part, batch);
      append_chunk(keep[k], meta, out, out_dim, start == 0);
    }
    meta.data = keep[k].data();
    int64_t stride = 1;
    for (int d = meta.ndim - 1; d >= 0; --d) {
      meta.strides[d] = stride;
      stride *= meta.shape[d];
    }
    results.emplace_back("out" + std::to_string(k), meta);
  }
  write_safetensors(dir / "outputs.safetensors", results);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t chunk = 0;
  if (argc == 4 && std::string(argv[1]) == "--chunk") {
    chunk = std::stoll(argv[2]);
    argv += 2;
    argc -= 2;
  }
  if (argc != 2) {
    std::cerr << "usage: fuselm_run_graph --list-ops | [--chunk N] CASES_DIR\n";
    return 2;
  }
  const std::string arg = argv[1];
  if (arg == "--list-ops") {
    for (const auto& name : fuselm::runtime::OpRegistry::builtin().names()) std::cout << name << "\n";
    return 0;
  }
  int failed = 0;
  for (const auto& entry : fs::directory_iterator(arg)) {
    if (!entry.is_directory()) continue;
    fs::remove(entry.path() / "error.txt");
    fs::remove(entry.path() / "outputs.safetensors");
    try {
      run_case(entry.path(), chunk);
    } catch (const std::exception& e) {
      ++failed;
      std::ofstream(entry.path() / "error.txt") << e.what() << "\n";
    }
  }
  std::cerr << "fuselm_run_graph: " << failed << " case(s) failed\n";
  return 0;
}
