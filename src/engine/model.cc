#include "engine/model.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "weights/unused_tensors.h"

namespace fuselm::engine {
namespace {

using runtime::Tensor;

runtime::DType to_ir_dtype(kernels::DType d) {
  switch (d) {
    case kernels::DType::f32: return runtime::DType::f32;
    case kernels::DType::bf16: return runtime::DType::bf16;
    case kernels::DType::f16: return runtime::DType::f16;
  }
  return runtime::DType::f32;
}

runtime::DType file_dtype(weights::FileDType d, const std::string& what) {
  switch (d) {
    case weights::FileDType::F32: return runtime::DType::f32;
    case weights::FileDType::F64: return runtime::DType::f64;
    case weights::FileDType::BF16: return runtime::DType::bf16;
    case weights::FileDType::F16: return runtime::DType::f16;
    case weights::FileDType::I64: return runtime::DType::i64;
    case weights::FileDType::I32: return runtime::DType::i32;
    case weights::FileDType::BOOL: return runtime::DType::boolean;
    case weights::FileDType::U8: return runtime::DType::u8;
    default: throw std::runtime_error(what + ": unsupported constant dtype");
  }
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) return nlohmann::json::object();
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(p.string() + ": malformed JSON: " + e.what());
  }
}

size_t kernel_dtype_size(kernels::DType d) { return d == kernels::DType::f32 ? 4 : 2; }

// A fusion's stacked weight: concat(sources, axis) in the sources' storage dtype, in an owned
// 64-byte aligned buffer.
Tensor stack_weights(const fusers::WeightTransform& w, const weights::LoadedParameters& params,
                     std::vector<weights::AlignedBuffer>& buffers) {
  std::vector<const weights::WeightView*> src;
  for (const auto& t : w.source_targets) src.push_back(&params.at(t));
  const auto dtype = src[0]->dtype;
  const size_t es = kernel_dtype_size(dtype);
  const auto& s0 = src[0]->shape;
  const int nd = static_cast<int>(s0.size());
  if (w.axis < 0 || w.axis >= nd) throw std::runtime_error(fmt::format("fused weight {}: axis {} out of range", w.target, w.axis));
  int64_t outer = 1, total_axis = 0;
  for (int d = 0; d < w.axis; ++d) outer *= s0[d];
  for (const auto* v : src) {
    if (v->dtype != dtype || static_cast<int>(v->shape.size()) != nd)
      throw std::runtime_error(fmt::format("fused weight {}: sources differ in dtype or rank", w.target));
    for (int d = 0; d < nd; ++d)
      if (d != w.axis && v->shape[d] != s0[d])
        throw std::runtime_error(fmt::format("fused weight {}: source shapes do not stack along dim {}", w.target, w.axis));
    total_axis += v->shape[w.axis];
  }
  std::vector<int64_t> shape = s0;
  shape[w.axis] = total_axis;
  if (!w.shape.empty() && shape != w.shape)
    throw std::runtime_error(fmt::format("fused weight {}: stacked shape differs from the fusion's plan", w.target));
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  weights::AlignedBuffer buf(static_cast<size_t>(numel) * es);
  char* dst = static_cast<char*>(buf.data());
  for (int64_t o = 0; o < outer; ++o)
    for (const auto* v : src) {
      const size_t chunk = static_cast<size_t>(v->numel() / outer) * es;
      std::memcpy(dst, static_cast<const char*>(v->data) + o * chunk, chunk);
      dst += chunk;
    }
  Tensor t = Tensor::contiguous_view(buf.data(), to_ir_dtype(dtype), shape);
  buffers.push_back(std::move(buf));
  return t;
}

void add_ids(const nlohmann::json& v, std::vector<int64_t>& out) {
  if (v.is_number_integer()) out.push_back(v.get<int64_t>());
  else if (v.is_array())
    for (const auto& x : v)
      if (x.is_number_integer()) out.push_back(x.get<int64_t>());
}

}  // namespace

std::vector<kv::LayerShape> attention_layer_shapes(const ir::Graph& g) {
  std::map<int64_t, std::pair<kv::LayerShape, std::string>> layers;
  for (const auto& n : g.nodes) {
    // fuselm.mla_attention (the mla fuser's): one latent row [latent | rope key] per slot, no V.
    const bool mla = n.op == "fuselm.mla_attention.default";
    if (n.op != "fuselm.attention.default" && !mla) continue;
    std::string module = n.module_stack.empty() ? "<root>" : g.modules[n.module_stack.back()].path;
    const size_t layer_arg = mla ? 5 : 7;
    if (n.args.size() <= layer_arg || n.args[layer_arg].kind != ir::Arg::Kind::integer)
      throw std::runtime_error(fmt::format("attention in module {} has no integer layer index", module));
    const int64_t layer = n.args[layer_arg].i;
    if (layer < 0)
      throw std::runtime_error(fmt::format("attention in module {} has no layer_idx attribute", module));
    const auto& k = g.nodes[n.args[1].ref].out.shape;
    const auto& v = g.nodes[n.args[2].ref].out.shape;
    kv::LayerShape s;
    if (mla) {
      if (k.empty() || v.empty() || k.back().symbolic() || v.back().symbolic())
        throw std::runtime_error(fmt::format("latent attention in module {}: latent/rope widths are not static", module));
      s = kv::LayerShape{k.back().value + v.back().value, 0};
    } else {
      if (k.size() != 4 || v.size() != 4 || k[1].symbolic() || k[3].symbolic() || v[3].symbolic())
        throw std::runtime_error(fmt::format("attention in module {}: k/v head shapes are not static", module));
      s = kv::LayerShape{k[1].value * k[3].value, v[1].value * v[3].value};
    }
    auto [it, fresh] = layers.emplace(layer, std::make_pair(s, module));
    if (!fresh && it->second.second != module)
      throw std::runtime_error(fmt::format("layer index {} is claimed by two modules: {} and {}", layer,
                                           it->second.second, module));
  }
  std::vector<kv::LayerShape> out;
  for (const auto& [idx, entry] : layers) {
    if (idx != static_cast<int64_t>(out.size()))
      throw std::runtime_error(fmt::format("no attention module serves layer index {}", out.size()));
    out.push_back(entry.first);
  }
  return out;
}

namespace {

// MLA that runs as full attention (expanded K/V, the larger cache) is a visible fallback: one
// warning per module, with the fuser's reason, or the option that turned it off.
void warn_mla_fallbacks(const ir::Graph& g, const fusers::Options& options, const fusers::Report* report) {
  const bool off = !options.enabled ||
                   std::find(options.disabled.begin(), options.disabled.end(), "mla") != options.disabled.end();
  if (off) {
    const auto probe = fusers::apply(g, {});
    for (const auto& e : probe.report.entries)
      if (e.fuser == "mla" && e.status == fusers::ReportEntry::Status::fused)
        std::fprintf(stderr, "fuselm: warning: %s: latent attention turned off (%s); running full attention\n",
                     e.module.c_str(), options.enabled ? "--disable-fuser mla" : "--no-fuse");
    return;
  }
  if (report)
    for (const auto& e : report->entries)
      if (e.fuser == "mla" && e.status == fusers::ReportEntry::Status::rejected)
        std::fprintf(stderr, "fuselm: warning: %s: latent attention not fused (%s); running full attention\n",
                     e.module.c_str(), e.detail.c_str());
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::filesystem::path& model_dir, const std::filesystem::path& ir_dir,
                                   const ModelOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->graph_ = ir::load(ir_dir / "ir.json");
  std::vector<fusers::WeightTransform> fused_weights;
  if (!options.fusers.enabled) warn_mla_fallbacks(m->graph_, options.fusers, nullptr);
  if (options.fusers.enabled) {
    auto plan = fusers::apply(m->graph_, options.fusers);
    warn_mla_fallbacks(m->graph_, options.fusers, &plan.report);
    if (!plan.report.errors.empty()) throw std::runtime_error(plan.report.errors.front());
    m->graph_ = std::move(plan.graph);
    m->fusion_report_ = std::move(plan.report);
    fused_weights = std::move(plan.weights);
  }
  auto checkpoint = weights::Checkpoint::open(model_dir);
  weights::LoadOptions lo;
  lo.dtype = options.dtype;
  m->params_.emplace(weights::load_parameters(m->graph_.parameters, checkpoint, lo));
  weights::check_unused_tensors(m->graph_.parameters, checkpoint, options.allow_unused_weights);

  std::map<std::string, Tensor> params, constants;
  std::map<const void*, int64_t> seen;
  for (const auto& [target, view] : m->params_->views()) {
    Tensor t = Tensor::contiguous_view(const_cast<void*>(view.data), to_ir_dtype(view.dtype), view.shape);
    params[target] = t;
  }
  for (const auto& w : fused_weights) params[w.target] = stack_weights(w, *m->params_, m->fused_buffers_);
  // Bytes read per token: every parameter the (rewritten) graph still reads, once.
  std::set<std::string, std::less<>> read;
  for (const auto& n : m->graph_.nodes) {
    if (n.op != "placeholder" || n.placeholder_kind != "parameter") continue;
    read.insert(n.target);
    auto it = params.find(n.target);
    if (it == params.end()) continue;
    seen[it->second.data] = it->second.numel() * ir::dtype_size(it->second.dtype);
  }
  // The sources of stacked weights are read no more: drop their converted copies (bf16 SmolLM2
  // would otherwise hold its q/k/v and gate/up weights twice).
  std::erase_if(params, [&](const auto& entry) { return !read.contains(entry.first); });
  m->params_->retain_only(read);
  for (const auto& [p, bytes] : seen) m->weight_bytes_ += bytes;
  if (!m->graph_.constants.empty()) {
    m->constants_file_.emplace(weights::Checkpoint::open(ir_dir / "constants.safetensors"));
    for (const auto& [target, info] : m->graph_.constants.items()) {
      auto tv = m->constants_file_->at(target);
      std::vector<int64_t> shape(tv.shape.begin(), tv.shape.end());
      constants[target] = Tensor::contiguous_view(const_cast<void*>(tv.data), file_dtype(tv.dtype, target), shape);
    }
  }
  m->executor_ = std::make_unique<runtime::Executor>(m->graph_, params, constants);
  for (const auto& target : m->executor_->input_targets()) {
    if (target == "input_ids") m->input_roles_.push_back(0);
    else if (target == "position_ids") m->input_roles_.push_back(1);
    else throw std::runtime_error("the graph takes an input '" + target + "' that the engine does not provide");
  }
  m->inputs_.resize(m->input_roles_.size());

  const auto& model = m->graph_.model;
  m->vocab_size_ = model.value("vocab_size", int64_t{0});
  m->max_context_ = model.value("max_position_embeddings", int64_t{2048});
  auto config = read_json(model_dir / "config.json");
  auto gen = read_json(model_dir / "generation_config.json");
  add_ids(gen.contains("eos_token_id") ? gen["eos_token_id"] : config.value("eos_token_id", nlohmann::json()), m->eos_ids_);
  auto bos = gen.contains("bos_token_id") ? gen["bos_token_id"] : config.value("bos_token_id", nlohmann::json());
  if (bos.is_number_integer()) m->bos_id_ = bos.get<int64_t>();

  if (options.kv_tokens > m->max_context_)
    throw std::runtime_error(fmt::format("a KV cache of {} tokens was asked for, but the model's context is {} tokens",
                                         options.kv_tokens, m->max_context_));
  const int64_t kv_tokens = options.kv_tokens > 0 ? options.kv_tokens : m->max_context_;
  const int32_t blocks = static_cast<int32_t>((kv_tokens + options.kv_block_size - 1) / options.kv_block_size);
  m->kv_ = std::make_unique<kv::PagedKvCache>(attention_layer_shapes(m->graph_), blocks, options.kv_block_size);
  return m;
}

const runtime::Tensor& Model::forward(std::span<const int64_t> input_ids, std::span<const int64_t> positions,
                                      std::span<const runtime::SequenceSlice> sequences) {
  const int64_t n = static_cast<int64_t>(input_ids.size());
  ids_buf_.assign(input_ids.begin(), input_ids.end());
  pos_buf_.assign(positions.begin(), positions.end());
  const int64_t shape[2] = {1, n};
  for (size_t i = 0; i < input_roles_.size(); ++i)
    inputs_[i] = Tensor::contiguous_view(input_roles_[i] == 0 ? ids_buf_.data() : pos_buf_.data(), runtime::DType::i64, shape);
  runtime::Batch batch{sequences, kv_.get()};
  return executor_->run(inputs_, batch);
}

}  // namespace fuselm::engine
