// load_gguf_parameters: the IR's parameter table bound to the tensors of one GGUF file. Plain
// tensors (F32, F16, BF16) load as from safetensors; block tensors stay as blocks where the
// parameter may be quantized, else are dequantized. llama.cpp's q/k row order is undone here when
// capture asked for it (the entry's "rows"), moving whole rows so blocks need no dequantizing; any
// other transform transformers' tensor processor applies on reading (gguf_transform.h: offsets,
// transposes) makes that tensor f32, with one note on stderr when block tensors had to be dequantized.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "weights/convert.h"
#include "weights/error.h"
#include "weights/huge_page_copy.h"
#include "weights/gguf_tensor.h"
#include "weights/gguf_transform.h"
#include "weights/load_parameters.h"
#include "weights/quantized.h"

namespace fuselm::weights {
namespace {

struct GgufEntry {
  std::vector<int64_t> shape;
  std::string key, recorded_type;
  GgufTransform transform;  // what transformers' tensor processor does on reading (gguf_transform.h)
};

GgufEntry parse_gguf_entry(const std::string& target, const nlohmann::json& p) {
  auto bad = [&](const std::string& what) { throw WeightsError(fmt::format("IR parameter '{}': {}", target, what)); };
  GgufEntry e;
  if (!p.is_object() || !p.contains("shape") || !p["shape"].is_array()) bad("has no \"shape\" list");
  for (const auto& d : p["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) bad("has a shape that is not a list of non-negative integers");
    e.shape.push_back(d.get<int64_t>());
  }
  const auto ck = p.find("checkpoint");
  if (ck == p.end() || !ck->is_object()) bad("has no \"checkpoint\" object");
  const auto keys = ck->find("keys");
  if (keys == ck->end() || !keys->is_array() || keys->size() != 1 || !(*keys)[0].is_string())
    bad("needs exactly one GGUF tensor name in checkpoint \"keys\"");
  e.key = (*keys)[0].get<std::string>();
  if (auto d = ck->find("dtype"); d != ck->end() && d->is_string()) e.recorded_type = d->get<std::string>();
  e.transform = parse_gguf_transform(target, *ck, e.shape);
  return e;
}

std::optional<kernels::DType> plain_dtype(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return kernels::DType::f32;
    case 1: return kernels::DType::f16;
    case 30: return kernels::DType::bf16;
    default: return std::nullopt;
  }
}

kernels::DType float_target(kernels::DType file, const LoadOptions& o) {
  if (o.dtype == DTypePolicy::f32) return kernels::DType::f32;
  if (o.dtype == DTypePolicy::bf16) return kernels::DType::bf16;
  return file == kernels::DType::f16 && !o.keep_f16 ? kernels::DType::f32 : file;
}

/// Tensor t's bytes with whole rows in the order `tr` asks (the mapping itself when none).
const void* ordered_rows(const GgufFile& f, const GgufTensor& t, const GgufTransform& tr,
                         std::vector<AlignedBuffer>& buffers) {
  if (tr.unpermute_heads == 0 && tr.row_order.empty()) return t.bytes.data();
  const std::string file = f.path().string();
  const int64_t rows = tr.file_shape.empty() ? 0 : tr.file_shape[0];
  if (rows <= 0)
    throw WeightsError(fmt::format("{}: tensor '{}' of shape {} has no rows to reorder", file, t.name,
                                   format_shape(tr.file_shape)));
  std::vector<int64_t> order = tr.row_order;
  if (tr.unpermute_heads > 0) {
    try {
      order = rope_unpermute_rows(rows, tr.unpermute_heads);
    } catch (const std::invalid_argument& err) {
      throw WeightsError(fmt::format("{}: tensor '{}': {}", file, t.name, err.what()));
    }
  }
  return permute_rows(t.bytes.data(), static_cast<int64_t>(t.bytes.size()) / rows, order, buffers);
}

/// One parameter from tensor t (type checked, shape checked), transformed as its entry says.
WeightView load_one(const GgufFile& f, const GgufTensor& t, const std::string& target, const GgufEntry& e,
                    const LoadOptions& o, std::vector<AlignedBuffer>& buffers) {
  check_gguf_type_supported(f, t);
  const std::string file = f.path().string();
  if (!e.recorded_type.empty() && e.recorded_type != t.type->name)
    throw WeightsError(fmt::format("{}: tensor '{}' has type {} but the IR expects {} (the file changed since capture? "
                                   "re-run capture)", file, t.name, t.type->name, e.recorded_type));
  const GgufTransform& tr = e.transform;
  if (t.shape() != tr.file_shape)
    throw WeightsError(fmt::format("{}: tensor '{}' has shape {} but parameter '{}' is {}{}", file, t.name,
                                   format_shape(t.shape()), target, format_shape(e.shape),
                                   tr.file_shape == e.shape ? "" : fmt::format(" from file shape {}", format_shape(tr.file_shape))));
  const std::vector<int64_t>& shape = e.shape;
  const void* src = ordered_rows(f, t, tr, buffers);
  if (tr.changes_values()) {
    WeightView v = gguf_transformed_f32(src, t, tr, buffers);
    if (o.dtype == DTypePolicy::bf16) {
      AlignedBuffer& b = buffers.emplace_back(static_cast<size_t>(v.numel()) * kernels::dtype_size(kernels::DType::bf16));
      convert_elements(v.data, kernels::DType::f32, b.data(), kernels::DType::bf16, v.numel());
      v.data = b.data();
      v.dtype = kernels::DType::bf16;
    }
    v.checkpoint_key = t.name;
    return v;
  }
  WeightView v;
  if (auto q = kernels::quant_type_from_ggml(t.type->id)) {
    // Blocks run along the last dim: a reshape keeping it keeps every row's bytes.
    const bool keep = o.dtype != DTypePolicy::f32 && o.dtype != DTypePolicy::bf16 && o.may_quantize(target) &&
                      quantizable_shape(*q, shape) && shape.back() == tr.file_shape.back();
    if (keep) {
      v.shape = shape;
      v.quant = q;
      v.owned = src != t.bytes.data();
      v.data = v.owned ? src : huge_page_copy(src, t.bytes.size(), buffers, v.owned);
    } else {
      v = dequantize_tensor(src, *q, tr.file_shape,
                            o.dtype == DTypePolicy::bf16 ? kernels::DType::bf16 : kernels::DType::f32, buffers);
      v.shape = shape;  // a reshape keeps the flat order
    }
  } else {
    const kernels::DType from = *plain_dtype(t.type->id);
    const auto pq = policy_quant_type(o.dtype);
    if (pq && o.may_quantize(target) && quantizable_shape(*pq, shape)) {
      v = quantize_tensor(src, from, shape, *pq, buffers);
    } else {
      v.shape = shape;
      v.dtype = float_target(from, o);
      const bool aligned = reinterpret_cast<uintptr_t>(src) % static_cast<uintptr_t>(kernels::dtype_size(from)) == 0;
      if (v.dtype == from && aligned) {
        v.owned = src != t.bytes.data();
        v.data = v.owned ? src : huge_page_copy(src, t.bytes.size(), buffers, v.owned);
      } else {
        AlignedBuffer& b = buffers.emplace_back(static_cast<size_t>(v.numel() * kernels::dtype_size(v.dtype)));
        convert_elements(src, from, b.data(), v.dtype, v.numel());
        v.data = b.data();
        v.owned = true;
      }
    }
  }
  v.checkpoint_key = t.name;
  return v;
}

}  // namespace

LoadedParameters load_gguf_parameters(const nlohmann::json& parameters, const std::filesystem::path& gguf,
                                      const LoadOptions& options) {
  if (!parameters.is_object())
    throw WeightsError(fmt::format("IR parameters table is JSON {}, not an object", parameters.type_name()));
  LoadedParameters out;
  out.gguf_ = std::make_shared<const GgufFile>(GgufFile::open(gguf));
  const GgufFile& f = *out.gguf_;
  // Tied parameters read one tensor once; the same tensor under another transform is another view.
  std::unordered_map<std::string, WeightView> by_key;
  std::vector<std::string> dequantized;                 // block tensors a processor's transform made f32
  std::string processors;
  for (const auto& [target, p] : parameters.items()) {
    const GgufEntry e = parse_gguf_entry(target, p);
    const std::string key = e.key + '\n' + e.transform.signature();
    if (auto it = by_key.find(key); it != by_key.end()) {
      out.views_.emplace(target, it->second);
      continue;
    }
    const GgufTensor* t = f.find(e.key);
    if (!t)
      throw WeightsError(fmt::format("{}: parameter '{}' needs tensor '{}', which the file does not have (re-run capture)",
                                     f.path().string(), target, e.key));
    WeightView v = load_one(f, *t, target, e, options, out.buffers_);
    if (e.transform.changes_values() && gguf_type_quantized(t->type->id)) {
      dequantized.push_back(fmt::format("'{}' ({})", t->name, t->type->name));
      const std::string name = e.transform.processor.empty() ? "(unnamed processor)" : e.transform.processor;
      if (processors.find(name) == std::string::npos) processors += (processors.empty() ? "" : ", ") + name;
    }
    by_key.emplace(key, v);
    out.views_.emplace(target, std::move(v));
  }
  if (!dequantized.empty())
    std::fprintf(stderr, "fuselm: note: %s: %zu block tensors dequantized to f32 to apply transformers' %s (%s%s)\n",
                 f.path().string().c_str(), dequantized.size(), processors.c_str(), dequantized.front().c_str(),
                 dequantized.size() > 1 ? ", ..." : "");
  return out;
}

}  // namespace fuselm::weights
