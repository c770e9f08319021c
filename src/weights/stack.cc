#include "weights/stack.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "weights/error.h"
#include "weights/quantized.h"

namespace fuselm::weights {

WeightView slice(const WeightView& v, const SliceSpec& s, const std::string& what, std::vector<AlignedBuffer>& buffers) {
  const int nd = static_cast<int>(v.shape.size());
  if (s.axis < 0 || s.axis >= nd) throw WeightsError(fmt::format("{}: slice axis {} out of range", what, s.axis));
  if (v.quant && s.axis != 0)
    throw WeightsError(fmt::format("{}: a quantized weight can be split across ranks only by rows (dim 0), not dim {}",
                                   what, s.axis));
  // A quantized row is a run of whole blocks, so rows are sliced as bytes.
  size_t es = static_cast<size_t>(kernels::dtype_size(v.dtype));
  int64_t outer = 1, inner = 1, total = 0;
  for (int d = 0; d < s.axis; ++d) outer *= v.shape[d];
  for (int d = s.axis + 1; d < nd; ++d) inner *= v.shape[d];
  if (v.quant) {
    es = static_cast<size_t>(kernels::quant_row_bytes(*v.quant, v.shape.at(1)));
    inner = 1;
  }
  const int64_t along = v.shape[s.axis];
  for (const auto& [off, len] : s.pieces) {
    if (off < 0 || len <= 0 || off + len > along)
      throw WeightsError(fmt::format("{}: slice [{}, {}) outside its {} rows along dim {}", what, off, off + len, along, s.axis));
    total += len;
  }
  WeightView out = v;
  out.shape[s.axis] = total;
  AlignedBuffer buf(static_cast<size_t>(outer * total * inner) * es);
  char* dst = static_cast<char*>(buf.data());
  if (s.zero) std::memset(dst, 0, buf.size());
  for (int64_t o = 0; o < outer && !s.zero; ++o)
    for (const auto& [off, len] : s.pieces) {
      const size_t bytes = static_cast<size_t>(len * inner) * es;
      std::memcpy(dst, static_cast<const char*>(v.data) + static_cast<size_t>((o * along + off) * inner) * es, bytes);
      dst += bytes;
    }
  out.data = buf.data();
  out.owned = true;
  buffers.push_back(std::move(buf));
  return out;
}

WeightView stack_plain(const StackSpec& w, const std::vector<const WeightView*>& src, std::vector<AlignedBuffer>& buffers);

namespace {

// Quantized sources stacked along dim 0: blocks run along the rows, so the stacked tensor is the
// sources' bytes one after another. Sources of different block types (a Q4_K_M file's q and v)
// or an f32 one among them are dequantized, stacked, and the stack requantized to Q8_0 (ggml's
// reference quantizer) when its rows are whole 32-blocks: finer than every block type held (its
// rounding error, about amax/254 per 32 values plus its f16 scale's, is well under the parts' own), about a quarter
// of f32's bytes, and on the packed kernels. Otherwise the stack stays f32.
WeightView stack_quantized(const StackSpec& w, const std::vector<const WeightView*>& src,
                           std::vector<AlignedBuffer>& buffers) {
  const auto type = src[0]->quant;
  bool same = w.axis == 0;
  int64_t rows = 0;
  for (const auto* v : src) {
    same = same && v->quant == type && v->shape.size() == 2 && v->shape[1] == src[0]->shape[1];
    rows += v->shape.at(0);
  }
  std::vector<int64_t> shape = {rows, src[0]->shape.at(1)};
  if (!same) {
    // Dequantized copies of the quantized sources, then the float stack of those.
    std::vector<AlignedBuffer> scratch;
    std::vector<WeightView> plain;
    for (const auto* v : src) {
      if (!v->quant && v->dtype != kernels::DType::f32)
        throw WeightsError(fmt::format("fused weight {}: cannot stack {} with quantized sources", w.target,
                                       kernels::dtype_name(v->dtype)));
      plain.push_back(v->quant ? dequantize_tensor(v->data, *v->quant, v->shape, kernels::DType::f32, scratch) : *v);
    }
    std::vector<const WeightView*> ptrs;
    for (const auto& v : plain) ptrs.push_back(&v);
    if (w.axis != 0 || src[0]->shape.size() != 2 || shape[1] % 32 != 0) return stack_plain(w, ptrs, buffers);
    std::vector<AlignedBuffer> floats;  // the f32 stack lives only until it is requantized
    const WeightView stacked = stack_plain(w, ptrs, floats);
    return quantize_tensor(stacked.data, kernels::DType::f32, stacked.shape, kernels::QuantType::q8_0, buffers);
  }
  if (!w.shape.empty() && shape != w.shape)
    throw WeightsError(fmt::format("fused weight {}: stacked shape differs from the fusion's plan", w.target));
  size_t bytes = 0;
  for (const auto* v : src) bytes += v->nbytes();
  AlignedBuffer buf(bytes);
  char* dst = static_cast<char*>(buf.data());
  for (const auto* v : src) {
    std::memcpy(dst, v->data, v->nbytes());
    dst += v->nbytes();
  }
  WeightView out;
  out.shape = shape;
  out.quant = type;
  out.data = buf.data();
  out.owned = true;
  buffers.push_back(std::move(buf));
  return out;
}

}  // namespace

WeightView stack_plain(const StackSpec& w, const std::vector<const WeightView*>& src, std::vector<AlignedBuffer>& buffers) {
  const auto dtype = src[0]->dtype;
  const size_t es = static_cast<size_t>(kernels::dtype_size(dtype));
  const auto& s0 = src[0]->shape;
  const int nd = static_cast<int>(s0.size());
  if (w.axis < 0 || w.axis >= nd) throw WeightsError(fmt::format("fused weight {}: axis {} out of range", w.target, w.axis));
  int64_t outer = 1, total_axis = 0;
  for (int d = 0; d < w.axis; ++d) outer *= s0[d];
  for (const auto* v : src) {
    if (v->dtype != dtype || static_cast<int>(v->shape.size()) != nd)
      throw WeightsError(fmt::format("fused weight {}: sources differ in dtype or rank", w.target));
    for (int d = 0; d < nd; ++d)
      if (d != w.axis && v->shape[d] != s0[d])
        throw WeightsError(fmt::format("fused weight {}: source shapes do not stack along dim {}", w.target, w.axis));
    total_axis += v->shape[w.axis];
  }
  std::vector<int64_t> shape = s0;
  shape[w.axis] = total_axis;
  if (!w.shape.empty() && shape != w.shape)
    throw WeightsError(fmt::format("fused weight {}: stacked shape differs from the fusion's plan", w.target));
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  AlignedBuffer buf(static_cast<size_t>(numel) * es);
  char* dst = static_cast<char*>(buf.data());
  for (int64_t o = 0; o < outer; ++o)
    for (const auto* v : src) {
      const size_t chunk = static_cast<size_t>(v->numel() / outer) * es;
      std::memcpy(dst, static_cast<const char*>(v->data) + o * chunk, chunk);
      dst += chunk;
    }
  WeightView out;
  out.dtype = dtype;
  out.shape = shape;
  out.data = buf.data();
  out.owned = true;
  buffers.push_back(std::move(buf));
  return out;
}

WeightView stack(const StackSpec& w, const LoadedParameters& params, std::vector<AlignedBuffer>& buffers) {
  std::vector<const WeightView*> src;
  std::vector<WeightView> cut;  // this rank's slices of the sources
  std::vector<AlignedBuffer> scratch;
  if (!w.source_slices.empty() && w.source_slices.size() != w.sources.size())
    throw WeightsError(fmt::format("fused weight {}: {} slices for {} sources", w.target, w.source_slices.size(), w.sources.size()));
  cut.reserve(w.sources.size());
  for (size_t i = 0; i < w.sources.size(); ++i) {
    const WeightView& v = params.at(w.sources[i]);
    if (w.source_slices.empty()) {
      src.push_back(&v);
      continue;
    }
    cut.push_back(slice(v, w.source_slices[i], w.sources[i], scratch));
    src.push_back(&cut.back());
  }
  if (src.empty()) throw WeightsError(fmt::format("fused weight {}: no sources", w.target));
  if (std::any_of(src.begin(), src.end(), [](const WeightView* v) { return v->quant.has_value(); }))
    return stack_quantized(w, src, buffers);
  return stack_plain(w, src, buffers);
}

WeightView shard(const WeightView& v, const ShardSpec& s) {
  if (s.size != 1 || s.rank != 0)
    throw WeightsError(fmt::format("tensor parallelism over {} ranks is not built yet (rank {})", s.size, s.rank));
  return v;
}

std::map<std::string, WeightView> stack_and_shard(const std::vector<StackSpec>& specs, const LoadedParameters& params,
                                                  const ShardSpec& shard_spec, std::vector<AlignedBuffer>& buffers) {
  std::map<std::string, WeightView> out;
  for (const auto& spec : specs) out[spec.target] = shard(stack(spec, params, buffers), shard_spec);
  return out;
}

}  // namespace fuselm::weights
