// load_gguf_parameters: the IR's parameter table bound to the tensors of one GGUF file. Plain
// tensors (F32, F16, BF16) load as from safetensors; block tensors stay as blocks where the
// parameter may be quantized, else are dequantized. llama.cpp's q/k row order is undone here when
// capture asked for it (the entry's "rows"), moving whole rows so blocks need no dequantizing.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "weights/convert.h"
#include "weights/error.h"
#include "weights/huge_page_copy.h"
#include "weights/gguf_tensor.h"
#include "weights/load_parameters.h"
#include "weights/quantized.h"

namespace fuselm::weights {
namespace {

struct GgufEntry {
  std::vector<int64_t> shape;
  std::string key, recorded_type;
  int64_t unpermute_heads = 0;  // 0: rows as in the file
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
  if (auto r = ck->find("rows"); r != ck->end() && !r->is_null()) {
    auto h = r->is_object() ? r->find("unpermute_heads") : r->end();
    if (h == r->end() || !h->is_number_integer() || h->get<int64_t>() <= 0)
      bad(fmt::format("has checkpoint rows {}, not {{\"unpermute_heads\": H}}", r->dump()));
    e.unpermute_heads = h->get<int64_t>();
  }
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

/// One parameter from tensor t (type checked, shape checked), rows unpermuted when asked.
WeightView load_one(const GgufFile& f, const GgufTensor& t, const std::string& target, const GgufEntry& e,
                    const LoadOptions& o, std::vector<AlignedBuffer>& buffers) {
  check_gguf_type_supported(f, t);
  const std::string file = f.path().string();
  if (!e.recorded_type.empty() && e.recorded_type != t.type->name)
    throw WeightsError(fmt::format("{}: tensor '{}' has type {} but the IR expects {} (the file changed since capture? "
                                   "re-run capture)", file, t.name, t.type->name, e.recorded_type));
  const std::vector<int64_t> shape = t.shape();
  if (shape != e.shape)
    throw WeightsError(fmt::format("{}: tensor '{}' has shape {} but parameter '{}' is {}", file, t.name,
                                   format_shape(shape), target, format_shape(e.shape)));
  const void* src = t.bytes.data();
  if (e.unpermute_heads > 0) {
    const int64_t rows = shape.empty() ? 0 : shape[0];
    if (rows <= 0)
      throw WeightsError(fmt::format("{}: tensor '{}' of shape {} has no rows to unpermute", file, t.name,
                                     format_shape(shape)));
    std::vector<int64_t> order;
    try {
      order = rope_unpermute_rows(rows, e.unpermute_heads);
    } catch (const std::invalid_argument& err) {
      throw WeightsError(fmt::format("{}: tensor '{}': {}", file, t.name, err.what()));
    }
    src = permute_rows(src, static_cast<int64_t>(t.bytes.size()) / rows, order, buffers);
  }
  WeightView v;
  if (auto q = kernels::quant_type_from_ggml(t.type->id)) {
    const bool keep = o.dtype != DTypePolicy::f32 && o.dtype != DTypePolicy::bf16 && o.may_quantize(target) &&
                      quantizable_shape(*q, shape);
    if (keep) {
      v.shape = shape;
      v.quant = q;
      v.owned = src != t.bytes.data();
      v.data = v.owned ? src : huge_page_copy(src, t.bytes.size(), buffers, v.owned);
    } else {
      v = dequantize_tensor(src, *q, shape, o.dtype == DTypePolicy::bf16 ? kernels::DType::bf16 : kernels::DType::f32,
                            buffers);
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
  std::unordered_map<std::string, WeightView> by_key;  // tied parameters read one tensor once
  for (const auto& [target, p] : parameters.items()) {
    const GgufEntry e = parse_gguf_entry(target, p);
    if (auto it = by_key.find(e.key); it != by_key.end()) {
      out.views_.emplace(target, it->second);
      continue;
    }
    const GgufTensor* t = f.find(e.key);
    if (!t)
      throw WeightsError(fmt::format("{}: parameter '{}' needs tensor '{}', which the file does not have (re-run capture)",
                                     f.path().string(), target, e.key));
    WeightView v = load_one(f, *t, target, e, options, out.buffers_);
    by_key.emplace(e.key, v);
    out.views_.emplace(target, std::move(v));
  }
  return out;
}

}  // namespace fuselm::weights
