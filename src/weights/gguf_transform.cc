#include "weights/gguf_transform.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "kernels/cpu/quant.h"
#include "weights/convert.h"
#include "weights/error.h"
#include "weights/quantized.h"
#include "weights/safetensors.h"

namespace fuselm::weights {
namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

std::vector<int64_t> int_list(const nlohmann::json& j, const std::function<void(const std::string&)>& bad,
                              const char* what) {
  if (!j.is_array()) bad(fmt::format("has checkpoint \"{}\" {}, not a list", what, j.dump()));
  std::vector<int64_t> out;
  for (const auto& d : j) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) bad(fmt::format("has a checkpoint \"{}\" that is not a list of non-negative integers", what));
    out.push_back(d.get<int64_t>());
  }
  return out;
}

void parse_rows(const nlohmann::json& r, GgufTransform& tr, const std::function<void(const std::string&)>& bad) {
  if (r.is_null()) return;
  const auto h = r.is_object() ? r.find("unpermute_heads") : r.end();
  const auto o = r.is_object() ? r.find("order") : r.end();
  if (r.is_object() && r.size() == 1 && h != r.end() && h->is_number_integer() && h->get<int64_t>() > 0) {
    tr.unpermute_heads = h->get<int64_t>();
    return;
  }
  if (!(r.is_object() && r.size() == 1 && o != r.end()))
    bad(fmt::format("has checkpoint rows {}, not {{\"unpermute_heads\": H}} or {{\"order\": [...]}}", r.dump().substr(0, 80)));
  tr.row_order = int_list(*o, bad, "rows.order");
  const int64_t rows = tr.file_shape.empty() ? 0 : tr.file_shape[0];
  std::vector<char> seen(static_cast<size_t>(std::max<int64_t>(rows, 0)), 0);
  bool ok = static_cast<int64_t>(tr.row_order.size()) == rows;
  for (int64_t x : tr.row_order) {
    ok = ok && x < rows && !seen[static_cast<size_t>(x)];
    if (ok) seen[static_cast<size_t>(x)] = 1;
  }
  if (!ok) bad(fmt::format("has a checkpoint row order that is not a permutation of the file's {} rows", rows));
}

ElementMap parse_map(const nlohmann::json& m, const std::function<void(const std::string&)>& bad) {
  static const std::pair<const char*, ElementMap> kMaps[] = {
      {"log", ElementMap::log}, {"log_neg", ElementMap::log_neg}, {"exp", ElementMap::exp}, {"neg_exp", ElementMap::neg_exp}};
  if (m.is_null()) return ElementMap::none;
  if (m.is_string())
    for (const auto& [name, map] : kMaps)
      if (m.get<std::string>() == name) return map;
  bad(fmt::format("has checkpoint map {}, not one of \"log\", \"log_neg\", \"exp\", \"neg_exp\"", m.dump().substr(0, 40)));
  return ElementMap::none;
}

float apply_map(ElementMap map, float x) {
  switch (map) {
    case ElementMap::log: return std::log(x);
    case ElementMap::log_neg: return std::log(-x);
    case ElementMap::exp: return std::exp(x);
    case ElementMap::neg_exp: return -std::exp(x);
    case ElementMap::none: break;
  }
  return x;
}

}  // namespace

std::string GgufTransform::signature() const {
  return fmt::format("{}|{}|{}|{}|{}|{}", fmt::join(file_shape, ","), fmt::join(row_order, ","), unpermute_heads,
                     transpose, offset, static_cast<int>(map));
}

GgufTransform parse_gguf_transform(const std::string& target, const nlohmann::json& ck,
                                   const std::vector<int64_t>& shape) {
  const std::function<void(const std::string&)> bad = [&](const std::string& what) {
    throw WeightsError(fmt::format("IR parameter '{}': {}", target, what));
  };
  GgufTransform tr;
  tr.file_shape = ck.contains("file_shape") ? int_list(ck["file_shape"], bad, "file_shape") : shape;
  if (auto p = ck.find("processor"); p != ck.end() && p->is_string()) tr.processor = p->get<std::string>();
  if (auto t = ck.find("transpose"); t != ck.end() && !t->is_null()) {
    if (!t->is_boolean()) bad(fmt::format("has checkpoint transpose {}, not a boolean", t->dump()));
    tr.transpose = t->get<bool>();
  }
  if (auto o = ck.find("offset"); o != ck.end() && !o->is_null()) {
    if (!o->is_number()) bad(fmt::format("has checkpoint offset {}, not a number", o->dump()));
    tr.offset = o->get<float>();
  }
  if (auto m = ck.find("map"); m != ck.end()) tr.map = parse_map(*m, bad);
  if (auto r = ck.find("rows"); r != ck.end()) parse_rows(*r, tr, bad);
  if (tr.transpose) {
    const bool fits = tr.file_shape.size() == 2 && shape.size() == 2 && tr.file_shape[0] == shape[1] &&
                      tr.file_shape[1] == shape[0];
    if (!fits) bad(fmt::format("transposes file shape {} into {}, which is not its transpose", format_shape(tr.file_shape),
                               format_shape(shape)));
  } else if (numel(tr.file_shape) != numel(shape)) {
    bad(fmt::format("reshapes file shape {} into {}, of another element count", format_shape(tr.file_shape),
                    format_shape(shape)));
  }
  return tr;
}

WeightView gguf_transformed_f32(const void* src, const GgufTensor& t, const GgufTransform& tr,
                                std::vector<AlignedBuffer>& buffers) {
  WeightView v;
  if (auto q = kernels::quant_type_from_ggml(t.type->id)) {
    v = dequantize_tensor(src, *q, tr.file_shape, kernels::DType::f32, buffers);
  } else {
    const kernels::DType from = t.type->id == 1 ? kernels::DType::f16 : t.type->id == 30 ? kernels::DType::bf16
                                                                                         : kernels::DType::f32;
    AlignedBuffer& b = buffers.emplace_back(static_cast<size_t>(numel(tr.file_shape)) * sizeof(float));
    convert_elements(src, from, b.data(), kernels::DType::f32, numel(tr.file_shape));
    v.shape = tr.file_shape;
    v.dtype = kernels::DType::f32;
    v.data = b.data();
    v.owned = true;
  }
  auto* values = static_cast<float*>(const_cast<void*>(v.data));  // our own buffer
  if (tr.transpose) {
    const int64_t a = tr.file_shape[0], c = tr.file_shape[1];
    AlignedBuffer& b = buffers.emplace_back(static_cast<size_t>(a * c) * sizeof(float));
    auto* out = static_cast<float*>(b.data());
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < c; ++j) out[j * a + i] = values[i * c + j];
    values = out;
    v.data = out;
    v.shape = {c, a};
  }
  if (tr.offset != 0.0f)
    for (int64_t i = 0, n = numel(v.shape); i < n; ++i) values[i] += tr.offset;
  if (tr.map != ElementMap::none)
    for (int64_t i = 0, n = numel(v.shape); i < n; ++i) values[i] = apply_map(tr.map, values[i]);
  return v;
}

}  // namespace fuselm::weights
