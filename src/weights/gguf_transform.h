#pragma once
// What transformers' GGUF tensor processor does to a tensor on reading
// (transformers/modeling_gguf_pytorch_utils.py, TENSOR_PROCESSORS), as capture recorded it in the
// parameter's checkpoint entry (python/fuselm_capture/gguf_transforms.py finds it by running the
// processor on probes). The loader applies it generically, with no per-architecture code:
//   value = map(reshape(transpose?(rows[row_order](file tensor))) + offset)
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "weights/aligned_buffer.h"
#include "weights/gguf.h"
#include "weights/load_parameters.h"

namespace fuselm::weights {

/// An elementwise function a tensor processor applies (python/fuselm_capture/gguf_transforms.py,
/// ELEMENTWISE): llama.cpp's converters store some tensors through a function (Mamba's A as
/// -exp(A_log)) that transformers' processor inverts (log(-a)).
enum class ElementMap { none, log, log_neg, exp, neg_exp };

struct GgufTransform {
  std::vector<int64_t> file_shape;  // torch order; the parameter's shape unless the processor reshapes
  std::vector<int64_t> row_order;   // {"order": [...]}: output row r = file row row_order[r]; empty: as stored
  int64_t unpermute_heads = 0;      // {"unpermute_heads": H}: row order rope_unpermute_rows(rows, H)
  bool transpose = false;           // a 2-D [a, b] in the file is the parameter's [b, a]
  float offset = 0.0f;              // added to every element, in f32 (as numpy adds it to f32 values)
  ElementMap map = ElementMap::none;  // {"map": name}: a function applied to every element, in f32
  std::string processor;            // transformers' class, for messages

  /// Whether element values change (beyond whole rows moving): such tensors are f32 at load.
  bool changes_values() const { return transpose || offset != 0.0f || map != ElementMap::none; }
  /// Equal for equal transforms: parameters share one loaded tensor only when key and this agree.
  std::string signature() const;
};

/// Parses the transform fields of checkpoint entry `ck` of parameter `target` of torch `shape`:
/// "rows" (null | {"unpermute_heads": H} | {"order": [file row per row]}), "transpose" (bool),
/// "offset" (number), "map" ("log" | "log_neg" | "exp" | "neg_exp"), "file_shape" (list; default `shape`), "processor" (string). Throws
/// WeightsError naming the parameter for a malformed field, an order that is not a permutation of
/// the file's rows, or a file shape the transform cannot turn into `shape`.
GgufTransform parse_gguf_transform(const std::string& target, const nlohmann::json& ck,
                                   const std::vector<int64_t>& shape);

/// The f32 values of tensor `t` (its bytes at `src`, already row-ordered, of shape tr.file_shape)
/// transposed, offset and mapped as `tr` says, in a new owned buffer appended to `buffers`; the view has
/// the transposed shape. Block types are dequantized first (kernels::dequantize_row).
WeightView gguf_transformed_f32(const void* src, const GgufTensor& t, const GgufTransform& tr,
                                std::vector<AlignedBuffer>& buffers);

}  // namespace fuselm::weights
