#include "engine/model.h"

#include "passes/logit_rows.h"
#include "kv/pool_sizing.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "passes/shard_plan.h"
#include "engine/quant_weights.h"
#include "weights/stack.h"
#include "weights/unused_tensors.h"

namespace fuselm::engine {
namespace {

using runtime::Tensor;

runtime::DType file_dtype(DType d, const std::string& what) {
  if (!is_raw(d)) return d;
  throw std::runtime_error(what + ": unsupported constant dtype");
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

// The fusions' stacked weights as the weights pipeline makes them (weights/stack.h).
// Under TP each source is cut to this rank's slice first (passes::ShardPlan::stacked).
std::vector<weights::StackSpec> stack_specs(const std::vector<fusers::WeightTransform>& transforms,
                                            const passes::ShardPlan& shards) {
  std::vector<weights::StackSpec> specs;
  for (const auto& w : transforms) {
    weights::StackSpec s{w.target, w.source_targets, w.axis, w.shape, {}};
    if (auto it = shards.stacked.find(w.target); it != shards.stacked.end()) {
      for (const auto& sl : it->second) s.source_slices.push_back({sl.axis, sl.pieces, sl.zero});
      s.shape = shards.stacked_shape.at(w.target);
    }
    specs.push_back(std::move(s));
  }
  return specs;
}

// The communicator of a model loaded under tensor parallelism (ModelOptions::comm, required then).
dist::Communicator& tp_comm(const ModelOptions& options) {
  if (!options.comm) throw std::logic_error("Model::load: tensor parallel size > 1 without a communicator");
  return *options.comm;
}

std::vector<kv::LayerShape> to_layer_shapes(const std::vector<fusers::KvLayer>& layers) {
  std::vector<kv::LayerShape> out;
  for (const auto& l : layers) out.push_back(kv::LayerShape{l.k_width, l.v_width, l.k_head, l.v_head, l.latent});
  return out;
}

// A positive integer the IR's model record must hold (vocab_size, max_position_embeddings): never a
// default. Without a context length the KV cache has no size; without a vocabulary size token
// ids cannot be checked.
int64_t required_size(const nlohmann::json& model, const char* field, const std::filesystem::path& ir_dir) {
  const auto it = model.find(field);
  if (it == model.end() || it->is_null())
    throw std::runtime_error(fmt::format("{}: the model record has no '{}' (the config names none); set it in "
                                         "config.json and re-capture",
                                         (ir_dir / "ir.json").string(), field));
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    throw std::runtime_error(fmt::format("{}: '{}' is {}, not a positive integer; fix config.json and re-capture",
                                         (ir_dir / "ir.json").string(), field, it->dump()));
  return it->get<int64_t>();
}

void add_ids(const nlohmann::json& v, std::vector<int64_t>& out) {
  if (v.is_number_integer()) out.push_back(v.get<int64_t>());
  else if (v.is_array())
    for (const auto& x : v)
      if (x.is_number_integer()) out.push_back(x.get<int64_t>());
}

// The GGUF a model directory prepared from one holds (python/fuselm_capture/gguf_dir.py links it
// as model.gguf), or nullopt for a safetensors directory.
std::optional<std::filesystem::path> gguf_file(const std::filesystem::path& model_dir) {
  const auto p = model_dir / "model.gguf";
  if (std::filesystem::exists(p)) return p;
  return std::nullopt;
}

// Stacked quantized weights live on in their packed copies: their stacked blocks go, unless an
// embedding reads the blocks or no packed copy replaced them.
void free_packed_sources(const std::map<std::string, Tensor>& params, const std::set<std::string, std::less<>>& tables,
                         std::vector<weights::AlignedBuffer>& fused) {
  std::set<const void*> keep;
  for (const auto& [target, t] : params)
    if (!t.quant || !t.quant->packed || tables.contains(target)) keep.insert(t.data);
  std::erase_if(fused, [&](const weights::AlignedBuffer& b) { return !keep.contains(b.data()); });
}

}  // namespace

/// "Q4_0 77% Q6_K 22% F32 1%": each storage type's share of the weight bytes, largest first.
std::string weight_type_mix(const std::map<const void*, int64_t>& bytes,
                            const std::map<const void*, WeightStorage>& type) {
  std::map<std::string, int64_t> by_type;
  int64_t total = 0;
  for (const auto& [p, b] : bytes) by_type[type.at(p).name()] += b, total += b;
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [t, b] : by_type) order.push_back({b, t});
  std::sort(order.rbegin(), order.rend());
  std::string out;
  for (const auto& [b, t] : order) {
    std::string up = t;
    for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : " ", up, total ? 100.0 * b / total : 0.0);
  }
  return out;
}

std::string WeightStorage::name() const {
  return quant ? kernels::quant_info(*quant).name : std::string(ir::dtype_name(dtype));
}

kv::KvDType kv_dtype_for_weights(const std::map<const void*, int64_t>& bytes,
                                 const std::map<const void*, WeightStorage>& type) {
  int64_t f32 = 0, total = 0;
  for (const auto& [p, b] : bytes) {
    total += b;
    if (type.at(p) == WeightStorage{ir::DType::f32, std::nullopt}) f32 += b;
  }
  return 2 * f32 >= total ? kv::KvDType::f32 : kv::KvDType::bf16;
}

std::vector<kv::LayerShape> attention_layer_shapes(const ir::Graph& g) {
  std::vector<std::string> errors;
  const auto layers = fusers::kv_layers(g, errors);
  if (!errors.empty()) throw std::runtime_error(errors.front());
  return to_layer_shapes(layers);
}

// Model::load's state between its steps: what each step makes and the next ones read.
struct ModelLoader {
  ModelLoader(const std::filesystem::path& model_dir, const std::filesystem::path& ir_dir, const ModelOptions& options)
      : model_dir(model_dir), ir_dir(ir_dir), options(options), m(new Model()) {}

  void fuse();
  void shard();
  void read_weights();
  void slice_and_stack();
  void quantize();
  void read_constants();
  void rewrite();
  void make_executor();
  void read_token_ids();
  void size_kv();
  void size_state(int64_t kv_bytes_per_token, kv::KvDType kv_dtype);

  const std::filesystem::path& model_dir;
  const std::filesystem::path& ir_dir;
  const ModelOptions& options;
  std::unique_ptr<Model> m;
  fusers::Plan plan;
  passes::ShardPlan shards;
  std::vector<fusers::WeightTransform> fused_weights;
  std::vector<kv::LayerShape> kv_layers;
  std::map<std::string, Tensor> params, constants;
  std::map<const void*, int64_t> seen;
  std::map<const void*, WeightStorage> seen_type;  // storage of each read weight
  std::set<std::string, std::less<>> sliced;  // parameters this rank holds a slice of
  std::map<std::string, weights::WeightView> quantized;  // target -> its blocks

 private:
  Tensor tensor_of(const std::string& target, const weights::WeightView& view);
};

std::unique_ptr<Model> Model::load(const std::filesystem::path& model_dir, const std::filesystem::path& ir_dir,
                                   const ModelOptions& options) {
  ModelLoader l(model_dir, ir_dir, options);
  l.fuse();             // the fusion plan: rewritten graph, stacked weights, KV layers
  l.shard();            // TP: the plan rewritten for this rank (before any weight is read)
  l.read_weights();     // the checkpoint's (or GGUF's) parameters, converted to the dtype policy
  l.slice_and_stack();  // this rank's slices, the fusions' stacked weights
  l.quantize();         // packed copies of quantized weights; unread copies freed; bytes per token
  l.read_constants();   // the capture's recomputed constants
  l.rewrite();          // LM-head row selection
  l.make_executor();    // the executor and the graph inputs the engine feeds
  l.read_token_ids();   // context length, EOS and BOS ids
  l.size_kv();          // the paged KV pool, and the state slots of a stateful graph
  return std::move(l.m);
}

void ModelLoader::fuse() {
  // The fusion plan is also the KV layout (its KV layers), with fusion on or off.
  plan = fusers::apply(ir::load(ir_dir / "ir.json"), options.fusers);
  for (const auto& w : plan.report.warnings) std::fprintf(stderr, "fuselm: warning: %s\n", w.c_str());
  if (!plan.report.errors.empty()) throw std::runtime_error(plan.report.errors.front());
}

void ModelLoader::shard() {
  // TP: the plan rewritten for this rank; widths that do not divide fail here, before any weight.
  shards = passes::shard_plan(plan, options.tp_size, options.tp_rank);
  if (options.tp_size > 1) m->shard_report_ = passes::format_shard_plan(shards);
  m->graph_ = std::move(plan.graph);
  if (options.fusers.enabled) m->fusion_report_ = std::move(plan.report);
  fused_weights = std::move(plan.weights);
  kv_layers = to_layer_shapes(plan.kv);
}

void ModelLoader::read_weights() {
  weights::LoadOptions lo;
  lo.dtype = options.dtype;
  const auto quantizable = quantizable_parameters(m->graph_, fused_weights);
  lo.quantizable = &quantizable;
  if (const auto gguf = gguf_file(model_dir)) {
    m->params_.emplace(weights::load_gguf_parameters(m->graph_.parameters, *gguf, lo));
  } else {
    auto checkpoint = weights::Checkpoint::open(model_dir);
    m->params_.emplace(weights::load_parameters(m->graph_.parameters, checkpoint, lo));
    weights::check_unused_tensors(m->graph_.parameters, m->graph_.model.value("unread_modules", nlohmann::json()),
                                  checkpoint, options.allow_unused_weights);
  }
}

Tensor ModelLoader::tensor_of(const std::string& target, const weights::WeightView& view) {
  if (view.quant) quantized[target] = view;
  return view.quant ? Tensor::contiguous_view(const_cast<void*>(view.data), runtime::DType::u8, view.shape)
                    : Tensor::contiguous_view(const_cast<void*>(view.data), view.dtype, view.shape);
}

void ModelLoader::slice_and_stack() {
  for (const auto& [target, v] : m->params_->views()) {
    weights::WeightView view = v;
    if (auto it = shards.params.find(target); it != shards.params.end()) {
      const auto& sl = it->second;
      view = weights::slice(v, {sl.axis, sl.pieces, sl.zero}, target, m->fused_buffers_);
      sliced.insert(target);
    }
    params[target] = tensor_of(target, view);
  }
  for (const auto& [target, view] : weights::stack_and_shard(stack_specs(fused_weights, shards), *m->params_,
                                                             weights::ShardSpec{}, m->fused_buffers_))
    params[target] = tensor_of(target, view);
}

void ModelLoader::quantize() {
  // Bytes read per token: every parameter the (rewritten) graph still reads, once.
  std::set<std::string, std::less<>> read;
  for (const auto& n : m->graph_.nodes) {
    if (n.op != "placeholder" || n.placeholder_kind != "parameter") continue;
    read.insert(n.target);
    auto it = params.find(n.target);
    if (it == params.end()) continue;
    seen[it->second.data] = it->second.numel() * ir::dtype_size(it->second.dtype);
    seen_type[it->second.data] = WeightStorage{it->second.dtype, std::nullopt};
    if (auto q = quantized.find(n.target); q != quantized.end()) {
      it->second.quant = m->quant_.adopt(q->second);
      seen[it->second.data] = it->second.quant->packed ? it->second.quant->packed->bytes()
                                                       : static_cast<int64_t>(q->second.nbytes());
      seen_type[it->second.data] = WeightStorage{it->second.dtype, it->second.quant->type};
    }
  }
  // The sources of stacked weights are read no more: drop their converted copies (bf16 SmolLM2
  // would otherwise hold its q/k/v and gate/up weights twice).
  std::erase_if(params, [&](const auto& entry) { return !read.contains(entry.first); });
  // Sliced parameters: only this rank's slice stays (the full converted copy is freed).
  std::set<std::string, std::less<>> keep_full;
  for (const auto& t : read)
    if (!sliced.contains(t)) keep_full.insert(t);
  m->params_->retain_only(keep_full);
  free_packed_sources(params, embedding_tables(m->graph_), m->fused_buffers_);
  for (const auto& [p, bytes] : seen) m->weight_bytes_ += bytes;
  m->weight_types_ = weight_type_mix(seen, seen_type);
}

void ModelLoader::read_constants() {
  if (m->graph_.constants.empty()) return;
  m->constants_file_.emplace(weights::Checkpoint::open(ir_dir / "constants.safetensors"));
  for (const auto& [target, info] : m->graph_.constants.items()) {
    auto tv = m->constants_file_->at(target);
    std::vector<int64_t> shape(tv.shape.begin(), tv.shape.end());
    constants[target] = Tensor::contiguous_view(const_cast<void*>(tv.data), file_dtype(tv.dtype, target), shape);
  }
}

void ModelLoader::rewrite() {
  m->vocab_size_ = required_size(m->graph_.model, "vocab_size", ir_dir);
  m->selects_rows_ = passes::select_sampled_rows(m->graph_, m->vocab_size_, m->select_rows_note_);
  // The selected rows' hidden states become an extra graph output, for embeddings (its buffer is
  // then kept until the next forward instead of being freed after the head reads it).
  if (const int sel = m->selects_rows_ ? passes::selected_hidden_node(m->graph_) : -1; sel >= 0) {
    m->hidden_output_ = m->graph_.outputs.size();
    m->graph_.outputs.push_back(sel);
  }
}

void ModelLoader::make_executor() {
  m->executor_ = std::make_unique<runtime::Executor>(m->graph_, params, constants, options.comm);
  for (const auto& target : m->executor_->input_targets()) {
    if (target == "input_ids") m->input_roles_.push_back(0);
    else if (target == "position_ids") m->input_roles_.push_back(1);
    else if (target == "cache_position") m->input_roles_.push_back(2);  // a forward without position_ids
    else throw std::runtime_error("the graph takes an input '" + target + "' that the engine does not provide");
  }
  m->inputs_.resize(m->input_roles_.size());
}

void ModelLoader::read_token_ids() {
  const auto& model = m->graph_.model;
  m->max_context_ = required_size(model, "max_position_embeddings", ir_dir);
  auto config = read_json(model_dir / "config.json");
  auto gen = read_json(model_dir / "generation_config.json");
  // generation_config.json, else config.json, else the text config capture recorded (a multimodal
  // wrapper's config.json keeps its token ids in the language model's sub-config).
  const auto token_id = [&](const char* field) {
    for (const nlohmann::json* j : std::array<const nlohmann::json*, 3>{&gen, &config, &model})
      if (j->contains(field) && !(*j)[field].is_null()) return (*j)[field];
    return nlohmann::json();
  };
  add_ids(token_id("eos_token_id"), m->eos_ids_);
  if (const auto bos = token_id("bos_token_id"); bos.is_number_integer()) m->bos_id_ = bos.get<int64_t>();
}

void ModelLoader::size_kv() {
  if (options.kv_tokens > m->max_context_)
    throw std::runtime_error(fmt::format("a KV cache of {} tokens was asked for, but the model's context is {} tokens",
                                         options.kv_tokens, m->max_context_));
  const kv::KvDType kv_dtype = options.kv_dtype_auto ? kv_dtype_for_weights(seen, seen_type) : options.kv_dtype;
  const int64_t per_token = kv::kv_bytes_per_token(kv_layers, kv_dtype);
  m->state_ops_ = stateful_ops(m->graph_);
  if (!m->state_ops_.empty()) return size_state(per_token, kv_dtype);
  const kv::PoolSizing sizing{options.kv_cache_bytes, options.kv_tokens, options.kv_max_seqs};
  int32_t blocks = kv::pool_blocks(sizing, per_token, m->max_context_, options.kv_block_size);
  if (options.tp_size > 1) blocks = static_cast<int32_t>(tp_comm(options).all_min(blocks));
  m->kv_ = std::make_unique<kv::PagedKvCache>(kv_layers, blocks, options.kv_block_size, kv_dtype);
}

// A stateful graph: its state slots and KV blocks share the budget (kv::stateful_pool).
void ModelLoader::size_state(int64_t kv_bytes_per_token, kv::KvDType kv_dtype) {
  const auto floats = state_floats(m->state_ops_);
  int64_t slot_bytes = 0;
  for (int64_t f : floats) slot_bytes += f * int64_t{sizeof(float)};
  const kv::PoolSizing sizing{options.kv_cache_bytes, options.kv_tokens, options.kv_max_seqs};
  // Under TP rank 0 alone schedules, and a checkpoint's copy would happen on rank 0 alone: none.
  const int32_t max_checkpoints = options.tp_size > 1 ? 0 : std::max(1, options.kv_max_seqs) * kv::kCheckpointsPerSequence;
  kv::StatefulPool p;
  try {
    p = kv::stateful_pool(sizing, kv_bytes_per_token, slot_bytes, max_checkpoints, m->max_context_,
                          options.kv_block_size, kv::available_memory_bytes());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  if (options.tp_size > 1) p.blocks = static_cast<int32_t>(tp_comm(options).all_min(p.blocks));
  m->kv_ = std::make_unique<kv::PagedKvCache>(kv_layers, p.blocks, options.kv_block_size, kv_dtype);
  m->states_ = std::make_unique<kv::StatePool>(floats, p.seq_slots, p.checkpoint_slots);
  kv::StatePool* states = m->states_.get();
  m->kv_->pool().set_evict_listener([states](uint64_t key) { states->drop(key); });
  std::fprintf(stderr,
               "fuselm: note: %zu stateful ops, %.2f MiB of state per sequence: %d sequence slots + %d prefix-cache "
               "checkpoint slots (%.1f MiB); KV: %d blocks of %d tokens (%.1f MiB)\n",
               m->state_ops_.size(), static_cast<double>(slot_bytes) / (1 << 20), p.seq_slots, p.checkpoint_slots,
               static_cast<double>(slot_bytes) * (p.seq_slots + p.checkpoint_slots) / (1 << 20), p.blocks,
               options.kv_block_size,
               static_cast<double>(kv_bytes_per_token) * p.blocks * options.kv_block_size / (1 << 20));
}

const runtime::Tensor& Model::forward(std::span<const int64_t> input_ids, std::span<const int64_t> positions,
                                      std::span<const runtime::SequenceSlice> sequences,
                                      std::optional<std::span<const int64_t>> logit_rows) {
  if (states_)
    for (size_t i = 0; i < sequences.size(); ++i)
      if (sequences[i].state_slot < 0 || sequences[i].state_slot >= states_->cache().num_slots())
        throw std::invalid_argument(fmt::format("forward: sequence {} has no state slot (state_slot {}), and the graph "
                                                "keeps recurrent state",
                                                i, sequences[i].state_slot));
  if (before_forward_) before_forward_(input_ids, positions, sequences, logit_rows);
  const int64_t n = static_cast<int64_t>(input_ids.size());
  ids_buf_.assign(input_ids.begin(), input_ids.end());
  pos_buf_.assign(positions.begin(), positions.end());
  const int64_t shape[2] = {1, n};
  for (size_t i = 0; i < input_roles_.size(); ++i)  // cache_position is [T], the others [1, T]
    inputs_[i] = Tensor::contiguous_view(input_roles_[i] == 0 ? ids_buf_.data() : pos_buf_.data(), runtime::DType::i64,
                                         input_roles_[i] == 2 ? std::span<const int64_t>(shape + 1, 1)
                                                              : std::span<const int64_t>(shape, 2));
  runtime::Batch batch{sequences, kv_.get(), states_ ? &states_->cache() : nullptr};
  if (logit_rows && logit_rows->empty()) throw std::invalid_argument("forward: logit_rows is empty");
  if (logit_rows && selects_rows_) {
    batch.select_rows = true;
    batch.logit_rows = *logit_rows;
  }
  const runtime::Tensor& all = executor_->run(inputs_, batch);
  last_selected_ = batch.select_rows;
  if (!logit_rows || selects_rows_) return all;
  // The graph computed every row: copy out the ones asked for.
  const int64_t width = all.shape[2], rows = static_cast<int64_t>(logit_rows->size());
  gathered_.resize(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = (*logit_rows)[r];
    if (src < 0 || src >= all.shape[1]) throw std::out_of_range(fmt::format("logit row {} is outside the batch", src));
    std::copy_n(all.ptr<float>() + src * width, width, gathered_.data() + r * width);
  }
  const int64_t out_shape[3] = {1, rows, width};
  gathered_view_ = runtime::Tensor::contiguous_view(gathered_.data(), runtime::DType::f32, out_shape);
  return gathered_view_;
}

int64_t Model::hidden_size() const {
  if (!hidden_output_) return 0;
  const auto& shape = graph_.nodes[graph_.outputs[hidden_output_]].out.shape;
  return shape.size() == 3 && !shape[2].symbolic() ? shape[2].value : 0;
}

const runtime::Tensor* Model::hidden_rows() const {
  if (!hidden_output_ || !last_selected_) return nullptr;
  return &executor_->output(hidden_output_);
}

}  // namespace fuselm::engine
