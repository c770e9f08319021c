#pragma once
// A loaded model: its captured graph, weights mapped from the checkpoint, recomputed constants,
// the executor and a KV cache. One forward() runs the graph on a flattened token batch.
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "fusers/plan.h"
#include "ir/graph.h"
#include "ir/load.h"
#include "engine/quant_weights.h"
#include "engine/state_ops.h"
#include "kv/paged_kv_cache.h"
#include "kv/state_pool.h"
#include "runtime/executor.h"
#include "weights/checkpoint.h"
#include "weights/load_parameters.h"

namespace fuselm::engine {

struct ModelOptions {
  weights::DTypePolicy dtype = weights::DTypePolicy::auto_;
  /// KV cache capacity in tokens (all sequences together); 0 = the model's context length.
  int64_t kv_tokens = 0;
  int32_t kv_block_size = 16;
  /// KV pool size in bytes (fuselm serve --kv-cache-memory); when > 0 it wins over kv_tokens and
  /// may exceed one context. 0 with kv_tokens 0: kv_max_seqs contexts, capped by free memory.
  /// A stateful model's budget also holds its state slots (kv::stateful_pool): one per
  /// sequence that can run at once (kv_max_seqs) and its prefix-cache checkpoints.
  int64_t kv_cache_bytes = 0;
  int32_t kv_max_seqs = 1;
  /// How the KV cache stores its rows (--kv-cache-dtype): bf16 halves its bytes per token.
  kv::KvDType kv_dtype = kv::KvDType::f32;
  /// --kv-cache-dtype auto (serve and chat): kv_dtype is ignored and the cache follows the loaded
  /// weights (kv_dtype_for_weights): f32 for an fp32 model, bf16 for bf16/f16/quantized ones.
  bool kv_dtype_auto = false;
  /// Fusers to run over the graph before it executes (on by default; --no-fuse, --disable-fuser).
  fusers::Options fusers;
  /// Run although checkpoint tensors in numbered blocks beyond the graph's go unread
  /// (--allow-unused-weights; weights/unused_tensors.h).
  bool allow_unused_weights = false;
  /// Tensor parallelism (src/dist): this process is rank tp_rank of tp_size; each rank holds its
  /// shards of the weights and KV cache (passes/shard_plan.h). The KV pool size is agreed over the
  /// ranks (the smallest), since rank 0's slots are used by all.
  int64_t tp_size = 1, tp_rank = 0;
  /// The job's communicator (engine/tp_session.h sets these three); required when tp_size > 1,
  /// it must outlive the model.
  dist::Communicator* comm = nullptr;
};

class Model {
 public:
  /// Loads model_dir (config.json, *.safetensors; or a directory gguf_dir.py prepared, whose
  /// model.gguf holds the weights) with the IR in ir_dir (ir.json, constants.safetensors). Throws std::runtime_error, one line naming the file, tensor or op.
  static std::unique_ptr<Model> load(const std::filesystem::path& model_dir, const std::filesystem::path& ir_dir,
                                     const ModelOptions& options = {});

  /// Runs the graph: input_ids and positions have one entry per token of the batch ([num_tokens]);
  /// batch describes the sequences. Returns logits [1, num_tokens, vocab] f32, or with
  /// `logit_rows` (indices into the batch, at least one) [1, rows, vocab] for those rows in that
  /// order: only they go through the LM head when the graph's head was found (selects_rows()),
  /// else they are copied out of the full logits. Valid until the next call.
  const runtime::Tensor& forward(std::span<const int64_t> input_ids, std::span<const int64_t> positions,
                                 std::span<const runtime::SequenceSlice> sequences,
                                 std::optional<std::span<const int64_t>> logit_rows = std::nullopt);
  /// Whether the LM head runs on the selected rows only (passes/logit_rows.h); when not,
  /// select_rows_note() says why.
  bool selects_rows() const { return selects_rows_; }
  /// The final hidden states [1, rows, hidden] f32 (the LM head's input) of the last forward's
  /// logit_rows, or nullptr when the graph's head was not found (exposes_hidden() false) or the
  /// forward gave no logit_rows. Valid until the next forward.
  const runtime::Tensor* hidden_rows() const;
  bool exposes_hidden() const { return hidden_output_ > 0; }
  /// The width of hidden_rows() (0 when not exposed).
  int64_t hidden_size() const;
  const std::string& select_rows_note() const { return select_rows_note_; }

  /// Called with every forward's inputs before it runs (rank 0 under TP broadcasts the step).
  using StepHook = std::function<void(std::span<const int64_t>, std::span<const int64_t>,
                                      std::span<const runtime::SequenceSlice>, std::optional<std::span<const int64_t>>)>;
  void set_before_forward(StepHook hook) { before_forward_ = std::move(hook); }
  /// inspect's lines for the tensor-parallel plan (empty at TP size 1).
  const std::string& shard_report() const { return shard_report_; }

  kv::PagedKvCache& kv_cache() { return *kv_; }
  /// The per-sequence recurrent state slots (docs/recurrent.md); nullptr for a graph without
  /// stateful ops. Every forward gives each sequence's slot (SequenceSlice::state_slot) to its ops.
  kv::StatePool* state_pool() { return states_.get(); }
  /// The graph's stateful ops in state index order (empty without any).
  const std::vector<StateOp>& state_ops() const { return state_ops_; }
  const ir::Graph& graph() const { return graph_; }
  runtime::Executor& executor() { return *executor_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t max_context() const { return max_context_; }
  /// Bytes of weights read per decoded token (every parameter once; a quantized one's packed
  /// copy or blocks).
  int64_t weight_bytes() const { return weight_bytes_; }
  /// The storage types of those bytes, largest share first: "Q4_0 77% Q6_K 22% F32 1%" (block
  /// types as kept in memory, dense ones by dtype; shares of weight_bytes(), rounded).
  const std::string& weight_types() const { return weight_types_; }
  const std::vector<int64_t>& eos_token_ids() const { return eos_ids_; }
  /// What the fusers did (empty when fusion is off).
  const fusers::Report& fusion_report() const { return fusion_report_; }
  std::optional<int64_t> bos_token_id() const { return bos_id_; }

 private:
  friend struct ModelLoader;  // Model::load's steps (model.cc)
  Model() = default;
  ir::Graph graph_;
  std::optional<weights::LoadedParameters> params_;
  fusers::Report fusion_report_;
  std::vector<weights::AlignedBuffer> fused_buffers_;  // stacked weights of the fusions
  QuantWeights quant_;  // packed copies of the quantized weights (quant_weights.h)
  std::optional<weights::Checkpoint> constants_file_;
  std::unique_ptr<runtime::Executor> executor_;
  std::unique_ptr<kv::PagedKvCache> kv_;
  std::unique_ptr<kv::StatePool> states_;
  std::vector<StateOp> state_ops_;
  std::vector<int64_t> ids_buf_, pos_buf_;
  std::vector<int> input_roles_;  // per graph input: 0 = token ids, 1 = positions [1, T], 2 = positions [T]
  std::vector<runtime::Tensor> inputs_;
  int64_t vocab_size_ = 0, max_context_ = 0, weight_bytes_ = 0;
  std::string weight_types_;
  std::vector<int64_t> eos_ids_;
  std::optional<int64_t> bos_id_;
  StepHook before_forward_;
  std::string shard_report_;
  bool selects_rows_ = false;
  size_t hidden_output_ = 0;  // the graph output holding the selected hidden states; 0: none
  bool last_selected_ = false;
  std::string select_rows_note_;
  std::vector<float> gathered_;  // selected rows when the graph cannot select them itself
  runtime::Tensor gathered_view_;
};

/// How one weight the model reads is stored: a plain dtype, or ggml blocks of a quantized type.
struct WeightStorage {
  ir::DType dtype = ir::DType::f32;
  std::optional<kernels::QuantType> quant;  // set: block-quantized (dtype is then not read)

  /// "f32", "bf16", "q4_k", ...: the dtype's or the quantized type's name.
  std::string name() const;
  bool operator==(const WeightStorage&) const = default;
};

/// The KV cache dtype of --kv-cache-dtype auto, from the weights a model reads (`bytes` and
/// `type` keyed by storage): f32 when plain f32 tensors hold at least half of the weight bytes (an
/// fp32 model keeps an fp32 cache, so its logits match an fp32 reference), else bf16 (as vLLM's
/// auto cache follows the model's dtype and llama.cpp keeps a 16-bit cache).
kv::KvDType kv_dtype_for_weights(const std::map<const void*, int64_t>& bytes,
                                 const std::map<const void*, WeightStorage>& type);

/// KV layout of every attention layer in the graph, indexed by the op's layer index
/// (fusers::kv_layers, the fusion plan's KV layers). Throws when a layer index is negative or
/// claimed by two modules, or, in a graph without stateful ops, missing between 0 and the
/// highest index (a stateful graph's missing indices hold no rows).
std::vector<kv::LayerShape> attention_layer_shapes(const ir::Graph& g);

}  // namespace fuselm::engine
