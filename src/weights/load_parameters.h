#pragma once
// Binding the IR's parameter table to checkpoint tensors: checked, deduplicated, converted.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant.h"
#include "weights/aligned_buffer.h"
#include "weights/checkpoint.h"
#include "weights/gguf.h"

namespace fuselm::weights {

/// The storage dtype the engine keeps weights in (the CLI's --dtype):
/// - auto: the checkpoint's own (F32 -> f32, BF16 -> bf16), except F16 -> f32 unless
///   LoadOptions::keep_f16;
/// - f32: everything in f32 (bf16/f16 widened exactly into owned buffers);
/// - bf16: everything in bf16 (f32/f16 rounded to nearest even into owned buffers);
/// - q8_0, q4_0: the weights LoadOptions::quantizable names that are 2-D with rows a whole number
///   of 32-blocks quantized at load (ggml's reference quantizers, kernels/cpu/quant.h), the rest
///   as under auto. Weights already quantized (a GGUF's) stay as they are.
/// A GGUF's quantized tensors stay quantized under auto, q8_0 and q4_0 where quantizable (else
/// they are dequantized to f32), and are dequantized under f32 and bf16.
enum class DTypePolicy : unsigned char { auto_, f32, bf16, q8_0, q4_0 };

/// Parses "auto" | "f32" | "bf16" | "q8_0" | "q4_0"; throws WeightsError naming the value and the choices.
DTypePolicy parse_dtype_policy(std::string_view name);
std::string_view dtype_policy_name(DTypePolicy p);

struct LoadOptions {
  DTypePolicy dtype = DTypePolicy::auto_;
  /// Under DTypePolicy::auto_, keep F16 checkpoints in f16 instead of widening them to f32.
  bool keep_f16 = false;
  /// Targets that may be held quantized: those only the linear and embedding ops read as their
  /// weight (engine::Model decides from the graph). nullptr: none.
  const std::set<std::string, std::less<>>* quantizable = nullptr;

  bool may_quantize(std::string_view target) const { return quantizable && quantizable->contains(target); }
};

/// One parameter as the engine reads it.
struct WeightView {
  kernels::DType dtype = kernels::DType::f32;  // storage dtype of `data`
  std::vector<int64_t> shape;
  /// Either a zero-copy view into the checkpoint's mapping (aligned at least to the element size)
  /// or a 64-byte aligned owned buffer (converted, or realigned because the file misaligned it).
  const void* data = nullptr;
  std::string checkpoint_key;
  bool owned = false;  // true when `data` is a buffer of LoadedParameters, not the mapping
  /// Set for a block-quantized weight: `data` holds shape[0] rows of
  /// kernels::quant_row_bytes(*quant, shape[1]) bytes of ggml blocks (`dtype` is then meaningless).
  std::optional<kernels::QuantType> quant;

  int64_t numel() const;
  /// Bytes of `data` (for a quantized weight, its blocks).
  size_t nbytes() const;
};

/// The loaded parameters: target (the IR's parameter name) -> WeightView. Owns the converted
/// buffers and keeps the checkpoint's mappings alive, so it may outlive the Checkpoint. Move-only.
class LoadedParameters {
 public:
  const std::map<std::string, WeightView, std::less<>>& views() const { return views_; }
  /// nullptr when `target` is not a parameter.
  const WeightView* find(std::string_view target) const;
  /// Throws WeightsError naming `target` when it is not a parameter.
  const WeightView& at(std::string_view target) const;
  size_t size() const { return views_.size(); }
  /// Bytes held in owned (converted or realigned) buffers.
  size_t owned_bytes() const;
  /// Forgets every parameter not in `keep` and frees the owned buffers that no kept parameter
  /// reads: after fusion a stacked copy replaces its sources, which need not stay converted in
  /// memory. Views of forgotten parameters dangle afterwards. Returns the bytes freed.
  size_t retain_only(const std::set<std::string, std::less<>>& keep);

 private:
  friend LoadedParameters load_parameters(const nlohmann::json&, const Checkpoint&, const LoadOptions&);
  friend LoadedParameters load_gguf_parameters(const nlohmann::json&, const std::filesystem::path&, const LoadOptions&);

  std::map<std::string, WeightView, std::less<>> views_;
  std::vector<AlignedBuffer> buffers_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::shared_ptr<const GgufFile> gguf_;
};

/// Loads every parameter of the IR's "parameters" table
/// (target -> {"shape": [..], "dtype": "f32", "checkpoint": {"keys": [k], "converter": null|str,
/// "file"?: str, "dtype"?: "F32"|"BF16"|"F16", "shape"?: [..], "tied_to"?: str}}) from `checkpoint`.
/// Each checkpoint key is read (and converted) once: parameters that share a key (tied weights)
/// share memory. Throws WeightsError, one line naming the parameter, key and file:
/// - a malformed table entry;
/// - a converter ("parameter X needs checkpoint conversion 'C', which this engine does not support
///   yet"), or other than one key;
/// - a key the checkpoint lacks (naming the key and the checkpoint directory);
/// - a file dtype other than the one recorded at capture, or a shape other than the IR's;
/// - a dtype the engine cannot compute with (only F32, BF16, F16 load).
LoadedParameters load_parameters(const nlohmann::json& parameters, const Checkpoint& checkpoint,
                                 const LoadOptions& options = {});

/// Loads the same table from one GGUF file (load_gguf.cc): each entry's single key is a GGUF
/// tensor name, "dtype" the ggml type recorded at capture ("Q4_1"), "shape" the torch shape, and
/// "rows": {"unpermute_heads": H} (or null) asks for rope_unpermute_rows(shape[0], H) (gguf_tensor.h);
/// "rows": {"order": [..]}, "transpose", "offset" and "file_shape" replay what transformers' tensor
/// processor does on reading (gguf_transform.h).
/// Tensors of every type gguf_type_supported names load; another type is a WeightsError naming the
/// tensor and its type, as are a missing tensor, a type or shape other than recorded.
LoadedParameters load_gguf_parameters(const nlohmann::json& parameters, const std::filesystem::path& gguf,
                                      const LoadOptions& options = {});

}  // namespace fuselm::weights
