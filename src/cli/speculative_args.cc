#include "cli/speculative_args.h"

#include <fmt/core.h>

#include <stdexcept>

#include "ir/op_defs.h"

namespace fuselm::cli {
namespace {

// A stateful (recurrent) op keeps one state per sequence that a rejected draft would have
// advanced, with nothing to roll it back to (docs/recurrent.md).
void refuse_stateful(const engine::Model& m, const char* which) {
  for (const auto& n : m.graph().nodes) {
    const ir::OpDef* def = ir::find_op_def(n.op);
    if (def && !def->state.empty())
      throw std::runtime_error(fmt::format("--speculative-method: the {} model's graph keeps a recurrent state ({}), which "
                                           "cannot roll back rejected drafts; run it without speculation",
                                           which, n.op));
  }
}

}  // namespace

void add_speculative_options(CLI::App& cmd, SpeculativeArgs& a) {
  cmd.add_option("--speculative-method", a.method,
                 "speculative decoding: ngram (prompt lookup, no extra model) or draft (--speculative-model); default: off")
      ->check(CLI::IsMember({"ngram", "draft"}));
  cmd.add_option("--num-speculative-tokens", a.num_tokens, "tokens drafted per step at most (K)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd.add_option("--speculative-model", a.model,
                 "draft model for --speculative-method draft: a model directory or .gguf with the target's vocabulary "
                 "(e.g. the target itself with --speculative-dtype q4_0)");
  cmd.add_option("--speculative-dtype", a.dtype, "weight storage of the draft model, as --dtype")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "bf16", "q8_0", "q4_0"}));
  cmd.add_option("--ngram-prompt-lookup-max", a.ngram_max, "longest n-gram the ngram drafter looks up")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd.add_option("--ngram-prompt-lookup-min", a.ngram_min, "shortest n-gram the ngram drafter looks up")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd.add_option("--speculative-disable-by-batch-size", a.disable_by_batch_size,
                 "draft nothing while more sequences than this run (the step is then bound by compute)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
}

Speculation setup_speculation(const SpeculativeArgs& a, engine::Model& target, const ModelArgs& target_args) {
  Speculation out;
  if (!a.enabled()) {
    if (!a.model.empty()) throw std::runtime_error("--speculative-model needs --speculative-method draft");
    return out;
  }
  if (target_args.tensor_parallel_size > 1)
    throw std::runtime_error("--speculative-method: speculative decoding does not run under --tensor-parallel-size");
  if (a.ngram_min > a.ngram_max)
    throw std::runtime_error(fmt::format("--ngram-prompt-lookup-min ({}) is more than --ngram-prompt-lookup-max ({})", a.ngram_min,
                                         a.ngram_max));
  out.options.method = engine::parse_spec_method(a.method);
  if (out.options.method == engine::SpecMethod::draft && a.model.empty())
    throw std::runtime_error("--speculative-method draft needs --speculative-model DIR_OR_GGUF");
  if (out.options.method == engine::SpecMethod::ngram && !a.model.empty())
    throw std::runtime_error("--speculative-model is for --speculative-method draft, not ngram");
  refuse_stateful(target, "target");
  out.options.num_tokens = a.num_tokens;
  out.options.ngram_min = a.ngram_min;
  out.options.ngram_max = a.ngram_max;
  out.options.disable_by_batch_size = a.disable_by_batch_size;
  if (out.options.method != engine::SpecMethod::draft) return out;
  ModelArgs d = target_args;
  d.model_dir = a.model;
  d.dtype = a.dtype;
  d.max_context = target_args.max_context > 0 ? target_args.max_context : target.max_context();
  out.draft = load_model(d);
  refuse_stateful(*out.draft->model, "draft");
  if (out.draft->model->vocab_size() != target.vocab_size())
    throw std::runtime_error(fmt::format("--speculative-model: the draft model's vocabulary ({} tokens) differs from the target's ({} tokens)",
                                         out.draft->model->vocab_size(), target.vocab_size()));
  out.draft_backend = std::make_unique<engine::ModelBackend>(*out.draft->model);
  out.options.draft_model = out.draft_backend.get();
  return out;
}

std::string describe(const SpeculativeArgs& a) {
  if (!a.enabled()) return "off";
  if (a.method == "ngram") return fmt::format("ngram K={} (n-gram {}..{})", a.num_tokens, a.ngram_max, a.ngram_min);
  return fmt::format("draft K={} ({}, {})", a.num_tokens, a.model, a.dtype);
}

}  // namespace fuselm::cli
