// fuselm_run_graph: runs captured graphs on given inputs, for the op tests against torch
// (tests/python/test_ops_torch.py). Not part of the engine: it loads an IR with ir::load, binds its
// inputs from a safetensors file and runs runtime::Executor once, with no fusers, no weights and
// no KV cache, so what is checked is one op of the generic interpreter as capture wrote it.
//
//   fuselm_run_graph --list-ops          every op of OpRegistry::builtin(), one a line
//   fuselm_run_graph CASES_DIR           for each CASES_DIR/<case>/ holding fuselm-ir/ir.json and
//                                        inputs.safetensors (tensors named by the graph's input
//                                        targets), writes outputs.safetensors (out0, out1, ... one
//                                        per graph output) or error.txt (the one-line error).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ir/load.h"
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

/// Runs one case directory; every output k comes from a run whose first output is k.
void run_case(const fs::path& dir) {
  fuselm::ir::Graph graph = fuselm::ir::load(dir / "fuselm-ir" / "ir.json");
  auto inputs_file = fuselm::weights::SafetensorsFile::open(dir / "inputs.safetensors");
  auto inputs = tensors_of(inputs_file);
  std::optional<fuselm::weights::SafetensorsFile> constants_file;
  std::map<std::string, Tensor> constants;
  if (!graph.constants.empty()) {
    constants_file.emplace(fuselm::weights::SafetensorsFile::open(dir / "fuselm-ir" / "constants.safetensors"));
    constants = tensors_of(*constants_file);
  }
  const std::vector<int> outputs = graph.outputs;
  std::vector<std::pair<std::string, Tensor>> results;
  std::vector<std::vector<char>> keep;  // each run's output copied before the next executor
  std::vector<fuselm::ir::Graph> graphs;
  graphs.reserve(outputs.size());
  std::vector<std::unique_ptr<fuselm::runtime::Executor>> executors;
  for (size_t k = 0; k < outputs.size(); ++k) {
    graphs.push_back(graph);
    graphs.back().outputs = {outputs[k]};
    executors.push_back(std::make_unique<fuselm::runtime::Executor>(graphs.back(), std::map<std::string, Tensor>{},
                                                                     constants));
    std::vector<Tensor> in;
    for (const auto& target : executors.back()->input_targets()) {
      auto it = inputs.find(target);
      if (it == inputs.end()) throw std::runtime_error("inputs.safetensors has no tensor " + target);
      in.push_back(it->second);
    }
    results.emplace_back("out" + std::to_string(k), executors.back()->run(in, {}));
  }
  write_safetensors(dir / "outputs.safetensors", results);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuselm_run_graph --list-ops | CASES_DIR\n";
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
      run_case(entry.path());
    } catch (const std::exception& e) {
      ++failed;
      std::ofstream(entry.path() / "error.txt") << e.what() << "\n";
    }
  }
  std::cerr << "fuselm_run_graph: " << failed << " case(s) failed\n";
  return 0;
}
