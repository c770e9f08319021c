#include "weights/load_parameters.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "weights/convert.h"
#include "weights/error.h"
#include "weights/huge_page_copy.h"
#include "weights/quantized.h"

namespace fuselm::weights {

namespace {

constexpr const char* kRecapture = "(the checkpoint changed since capture? re-run capture)";

kernels::DType target_dtype(kernels::DType file, const LoadOptions& o) {
  switch (o.dtype) {
    case DTypePolicy::f32: return kernels::DType::f32;
    case DTypePolicy::bf16: return kernels::DType::bf16;
    case DTypePolicy::auto_:
    case DTypePolicy::q8_0:
    case DTypePolicy::q4_0: break;
  }
  return file == kernels::DType::f16 && !o.keep_f16 ? kernels::DType::f32 : file;
}

/// One parameter's table entry, checked for form.
struct ParamEntry {
  std::vector<int64_t> shape;
  std::string key;
  std::optional<std::string> recorded_dtype;  // checkpoint dtype at capture ("BF16")
  std::string recorded_file;                  // may be empty
  std::string tied_to;                        // may be empty
  std::optional<std::vector<int64_t>> recorded_shape;  // checkpoint shape at capture
  // Per-expert checkpoint tensors stacked into one [E, ...] parameter (capture's "stack"): `keys`
  // holds experts × parts keys, expert-major; part p of expert e is concatenated along
  // `concat_dim` of the stacked tensor (-1: one part per expert).
  std::vector<std::string> keys;
  int64_t experts = 0, parts = 0, concat_dim = -1;
  // false for "experts": 0, a plain concatenation of the parts along concat_dim - 1 of the
  // parameter itself (transformers' Concatenate alone: q/k/v convolution weights merged into one).
  bool expert_axis = true;
  // One chunk of a checkpoint tensor that holds several parameters (capture's "chunk",
  // transformers' Chunk(dim)): part `chunk_index` of `chunk_count` equal parts along `chunk_dim`.
  int64_t chunk_index = -1, chunk_count = 0, chunk_dim = 0;
};

[[noreturn]] void bad_entry(const std::string& target, const std::string& what) {
  throw WeightsError(fmt::format("IR parameter '{}': {}", target, what));
}

/// The entry's "shape": a list of non-negative integers.
std::vector<int64_t> parse_shape(const std::string& target, const nlohmann::json& p) {
  auto sh = p.find("shape");
  if (sh == p.end() || !sh->is_array()) bad_entry(target, "has no \"shape\" list");
  std::vector<int64_t> shape;
  for (const auto& d : *sh) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      bad_entry(target, fmt::format("has shape {}, which is not a list of non-negative integers", sh->dump()));
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

/// A stacked entry: checkpoint "keys" (experts × parts) and "stack" {experts, parts, concat_dim}
/// that fit the entry's shape [E, ...]; "experts": 0 concatenates the parts along concat_dim of
/// the entry's own shape (no expert axis).
void parse_stack(const std::string& target, const nlohmann::json& ck, const nlohmann::json& stack, ParamEntry& e) {
  auto keys = ck.find("keys");
  auto int_of = [&](const char* name) -> int64_t {
    auto it = stack.find(name);
    if (it == stack.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) return -1;
    return it->get<int64_t>();
  };
  if (!stack.is_object() || keys == ck.end() || !keys->is_array())
    bad_entry(target, "has a malformed checkpoint \"stack\"");
  auto ex = stack.find("experts");
  e.expert_axis = !(ex != stack.end() && ex->is_number_integer() && ex->get<int64_t>() == 0);
  e.experts = e.expert_axis ? int_of("experts") : 1;
  e.parts = int_of("parts");
  auto cd = stack.find("concat_dim");
  e.concat_dim = cd == stack.end() || cd->is_null() ? -1 : cd->is_number_integer() ? cd->get<int64_t>() : -2;
  // Without an expert axis the parameter is one expert's [1, ...] stacked tensor with the axis left out.
  if (!e.expert_axis && e.concat_dim >= 0) ++e.concat_dim;
  const int64_t ndim = static_cast<int64_t>(e.shape.size()) + (e.expert_axis ? 0 : 1);
  if (e.experts <= 0 || e.parts <= 0 || e.concat_dim == -2 || e.concat_dim == 0 ||
      static_cast<int64_t>(keys->size()) != e.experts * e.parts || (e.concat_dim < 0 && e.parts != 1) ||
      e.shape.empty() || (e.expert_axis && e.shape[0] != e.experts) || e.concat_dim >= ndim)
    bad_entry(target, fmt::format("has checkpoint stack {} that does not fit {} keys and shape {}", stack.dump(),
                                  keys->size(), format_shape(e.shape)));
  for (const auto& k : *keys) {
    if (!k.is_string()) bad_entry(target, "has a checkpoint key that is not a string");
    e.keys.push_back(k.get<std::string>());
  }
  e.key = e.keys.front();
}

/// A one-key entry: the key and what capture recorded of it (dtype, file, tie, shape).
void parse_single(const std::string& target, const nlohmann::json& ck, ParamEntry& e) {
  auto keys = ck.find("keys");
  if (keys == ck.end() || !keys->is_array()) bad_entry(target, "has no checkpoint \"keys\" list");
  if (keys->size() != 1 || !(*keys)[0].is_string())
    bad_entry(target,
              fmt::format("maps to checkpoint keys {} without a converter; exactly one key is supported", keys->dump()));
  e.key = (*keys)[0].get<std::string>();
  auto str_field = [&](const char* name) -> std::optional<std::string> {
    auto it = ck.find(name);
    if (it == ck.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) bad_entry(target, fmt::format("checkpoint \"{}\" is {}, not a string", name, it->dump()));
    return it->get<std::string>();
  };
  e.recorded_dtype = str_field("dtype");
  e.recorded_file = str_field("file").value_or("");
  e.tied_to = str_field("tied_to").value_or("");
  if (auto rs = ck.find("shape"); rs != ck.end() && rs->is_array()) {
    std::vector<int64_t> shape;
    for (const auto& d : *rs)
      if (d.is_number_integer()) shape.push_back(d.get<int64_t>());
    if (shape.size() == rs->size()) e.recorded_shape = std::move(shape);
  }
}

/// A chunked entry's {"index", "count", "dim"}: 0 <= index < count, dim one of the parameter's.
void parse_chunk(const std::string& target, const nlohmann::json& chunk, ParamEntry& e) {
  auto int_of = [&](const char* name) -> int64_t {
    auto it = chunk.is_object() ? chunk.find(name) : chunk.end();
    return it != chunk.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
  };
  e.chunk_index = int_of("index"), e.chunk_count = int_of("count"), e.chunk_dim = int_of("dim");
  if (e.chunk_count < 2 || e.chunk_index < 0 || e.chunk_index >= e.chunk_count || e.chunk_dim < 0 ||
      e.chunk_dim >= static_cast<int64_t>(e.shape.size()))
    bad_entry(target, fmt::format("has checkpoint chunk {} that does not fit shape {}", chunk.dump(),
                                  format_shape(e.shape)));
}

ParamEntry parse_entry(const std::string& target, const nlohmann::json& p) {
  ParamEntry e;
  if (!p.is_object()) bad_entry(target, "the entry is not an object");
  e.shape = parse_shape(target, p);
  auto ck = p.find("checkpoint");
  if (ck == p.end() || !ck->is_object()) bad_entry(target, "has no \"checkpoint\" object");
  auto stack = ck->find("stack");
  if (stack != ck->end() && !stack->is_null()) {
    parse_stack(target, *ck, *stack, e);
    return e;
  }
  auto conv = ck->find("converter");
  if (conv != ck->end() && !conv->is_null())
    throw WeightsError(fmt::format("parameter {} needs checkpoint conversion '{}', which this engine does not support yet",
                                   target, conv->is_string() ? conv->get<std::string>() : conv->dump()));
  parse_single(target, *ck, e);
  if (auto chunk = ck->find("chunk"); chunk != ck->end() && !chunk->is_null()) parse_chunk(target, *chunk, e);
  return e;
}

/// The checkpoint tensor of one part of a stacked entry and its storage dtype; every part must
/// exist and have the dtype of the first (file_dtype, set by the first call).
std::pair<TensorView, kernels::DType> part_tensor(const std::string& target, const std::string& key,
                                                  const Checkpoint& checkpoint, std::optional<DType>& file_dtype) {
  const std::optional<TensorView> t = checkpoint.find(key);
  if (!t)
    throw WeightsError(fmt::format("{}: parameter '{}' needs checkpoint key '{}', which the checkpoint does not have {}",
                                   checkpoint.path().string(), target, key, kRecapture));
  const std::string file = t->file->path().string();
  if (file_dtype && *file_dtype != t->dtype)
    throw WeightsError(fmt::format("tensor '{}' in {} has dtype {}, other parts of parameter '{}' have {}", key, file,
                                   file_dtype_name(t->dtype), target, file_dtype_name(*file_dtype)));
  const std::optional<kernels::DType> from = kernels::storage_dtype(t->dtype);
  if (!from)
    throw WeightsError(fmt::format("tensor '{}' in {} has dtype {}; parameter '{}' needs F32, BF16 or F16", key, file,
                                   file_dtype_name(t->dtype), target));
  file_dtype = t->dtype;
  return {*t, *from};
}

/// A plain concatenation ("experts": 0) along dim cd of the parameter: the parts may differ in
/// size along cd (q, k and v widths), every other dim equal to the parameter's; their sizes along
/// cd must add up to the parameter's.
WeightView load_concatenated(const std::string& target, const ParamEntry& e, const Checkpoint& checkpoint,
                             const LoadOptions& options, std::vector<AlignedBuffer>& buffers) {
  const int64_t cd = e.concat_dim - 1;
  std::optional<DType> file_dtype;
  std::vector<std::pair<TensorView, kernels::DType>> parts;
  int64_t along = 0;
  for (const std::string& key : e.keys) {
    parts.push_back(part_tensor(target, key, checkpoint, file_dtype));
    const std::span<const int64_t> sh = parts.back().first.shape;
    bool fits = sh.size() == e.shape.size();
    for (size_t d = 0; fits && d < sh.size(); ++d) fits = static_cast<int64_t>(d) == cd || sh[d] == e.shape[d];
    if (!fits)
      throw WeightsError(fmt::format("tensor '{}' has shape {}, not a part of parameter '{}' {} along dim {} {}", key,
                                     format_shape(sh), target, format_shape(e.shape), cd, kRecapture));
    along += sh[cd];
  }
  if (along != e.shape[cd])
    throw WeightsError(fmt::format("the parts of parameter '{}' {} add up to {} along dim {} {}", target,
                                   format_shape(e.shape), along, cd, kRecapture));
  WeightView v;
  v.shape = e.shape;
  v.checkpoint_key = e.keys.front();
  v.owned = true;
  v.dtype = target_dtype(parts.front().second, options);
  const size_t out_es = static_cast<size_t>(kernels::dtype_size(v.dtype));
  char* out = static_cast<char*>(buffers.emplace_back(static_cast<size_t>(v.numel()) * out_es).data());
  v.data = out;
  int64_t outer = 1, rest = 1;  // blocks before cd; elements after it
  for (int64_t d = 0; d < cd; ++d) outer *= e.shape[d];
  for (size_t d = static_cast<size_t>(cd) + 1; d < e.shape.size(); ++d) rest *= e.shape[d];
  int64_t offset = 0;  // the part's first element within a block of the parameter
  for (const auto& [t, from] : parts) {
    const int64_t inner = t.shape[cd] * rest;
    const size_t in_es = static_cast<size_t>(kernels::dtype_size(from));
    for (int64_t o = 0; o < outer; ++o)
      convert_elements(static_cast<const char*>(t.data) + static_cast<size_t>(o * inner) * in_es, from,
                       out + static_cast<size_t>(o * along * rest + offset) * out_es, v.dtype,
                       inner);
    offset += inner;
  }
  return v;
}

/// Copies chunk `chunk_index` of the entry's checkpoint tensor into an owned buffer in the target
/// dtype: the tensor must have the parameter's shape but `chunk_count` times its size along
/// `chunk_dim` (torch.chunk of equal parts, as transformers' Chunk splits it).
WeightView load_chunk(const std::string& target, const ParamEntry& e, const Checkpoint& checkpoint,
                      const LoadOptions& options, std::vector<AlignedBuffer>& buffers) {
  std::optional<DType> file_dtype;
  const auto [t, from] = part_tensor(target, e.key, checkpoint, file_dtype);
  const int64_t cd = e.chunk_dim;
  bool fits = t.shape.size() == e.shape.size();
  for (size_t d = 0; fits && d < e.shape.size(); ++d)
    fits = t.shape[d] == (static_cast<int64_t>(d) == cd ? e.chunk_count * e.shape[d] : e.shape[d]);
  if (!fits)
    throw WeightsError(fmt::format("tensor '{}' in {} has shape {}, not {} chunks of parameter '{}' {} along dim {} {}",
                                   e.key, t.file->path().string(), format_shape(t.shape), e.chunk_count, target,
                                   format_shape(e.shape), cd, kRecapture));
  WeightView v;
  v.shape = e.shape;
  v.checkpoint_key = e.key;
  v.owned = true;
  v.dtype = target_dtype(from, options);
  const size_t out_es = static_cast<size_t>(kernels::dtype_size(v.dtype));
  const size_t in_es = static_cast<size_t>(kernels::dtype_size(from));
  char* out = static_cast<char*>(buffers.emplace_back(static_cast<size_t>(v.numel()) * out_es).data());
  v.data = out;
  int64_t outer = 1, inner = 1;  // blocks before the chunk dim; elements of one chunk per block
  for (int64_t d = 0; d < cd; ++d) outer *= e.shape[d];
  for (size_t d = static_cast<size_t>(cd); d < e.shape.size(); ++d) inner *= e.shape[d];
  for (int64_t o = 0; o < outer; ++o)
    convert_elements(static_cast<const char*>(t.data) + static_cast<size_t>((o * e.chunk_count + e.chunk_index) * inner) * in_es,
                     from, out + static_cast<size_t>(o * inner) * out_es, v.dtype, inner);
  return v;
}

/// Copies each expert's parts into one owned [E, ...] buffer in the target dtype. Every part must
/// exist, share one dtype, and have the per-expert shape with its concat dimension split evenly.
WeightView load_stacked(const std::string& target, const ParamEntry& e, const Checkpoint& checkpoint,
                        const LoadOptions& options, std::vector<AlignedBuffer>& buffers) {
  if (!e.expert_axis && e.concat_dim > 0) return load_concatenated(target, e, checkpoint, options, buffers);
  std::vector<int64_t> part_shape(e.shape.begin() + (e.expert_axis ? 1 : 0), e.shape.end());
  const int64_t cd = e.concat_dim - 1;  // concat dim within one expert
  if (cd >= 0) {
    if (part_shape[cd] % e.parts != 0)
      throw WeightsError(fmt::format("parameter '{}' of shape {} cannot be split into {} parts along dim {}", target,
                                     format_shape(e.shape), e.parts, e.concat_dim));
    part_shape[cd] /= e.parts;
  }
  std::optional<DType> file_dtype;
  WeightView v;
  v.shape = e.shape;
  v.checkpoint_key = e.keys.front();
  v.owned = true;
  int64_t part_n = 1;
  for (int64_t d : part_shape) part_n *= d;
  // A part is `outer` blocks of `inner` elements; its blocks interleave with the other parts'.
  int64_t outer = 1, inner = part_n;
  if (cd >= 0) {
    for (int64_t d = 0; d < cd; ++d) outer *= part_shape[d];
    inner = part_n / outer;
  }
  AlignedBuffer* buf = nullptr;
  size_t out_es = 0;
  for (size_t j = 0; j < e.keys.size(); ++j) {
    const std::string& key = e.keys[j];
    const auto [t, from] = part_tensor(target, key, checkpoint, file_dtype);
    if (!std::equal(part_shape.begin(), part_shape.end(), t.shape.begin(), t.shape.end()))
      throw WeightsError(fmt::format("tensor '{}' in {} has shape {} but parameter '{}' stacks parts of shape {} {}", key,
                                     t.file->path().string(), format_shape(t.shape), target, format_shape(part_shape),
                                     kRecapture));
    if (!buf) {
      v.dtype = target_dtype(from, options);
      out_es = static_cast<size_t>(kernels::dtype_size(v.dtype));
      buf = &buffers.emplace_back(static_cast<size_t>(v.numel()) * out_es);
      v.data = buf->data();
    }
    const int64_t ex = static_cast<int64_t>(j) / e.parts, part = static_cast<int64_t>(j) % e.parts;
    const size_t in_es = static_cast<size_t>(kernels::dtype_size(from));
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t dst = ex * part_n * e.parts + o * inner * e.parts + part * inner;
      convert_elements(static_cast<const char*>(t.data) + static_cast<size_t>(o * inner) * in_es, from,
                       static_cast<char*>(buf->data()) + static_cast<size_t>(dst) * out_es, v.dtype, inner);
    }
  }
  return v;
}

}  // namespace

DTypePolicy parse_dtype_policy(std::string_view name) {
  for (DTypePolicy p : {DTypePolicy::auto_, DTypePolicy::f32, DTypePolicy::bf16, DTypePolicy::q8_0, DTypePolicy::q4_0})
    if (name == dtype_policy_name(p)) return p;
  throw WeightsError(fmt::format("unknown weight dtype '{}' (choose auto, f32, bf16, q8_0 or q4_0)", name));
}

std::string_view dtype_policy_name(DTypePolicy p) {
  switch (p) {
    case DTypePolicy::auto_: return "auto";
    case DTypePolicy::f32: return "f32";
    case DTypePolicy::bf16: return "bf16";
    case DTypePolicy::q8_0: return "q8_0";
    case DTypePolicy::q4_0: return "q4_0";
  }
  return "?";
}

int64_t WeightView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t WeightView::nbytes() const {
  if (quant) return static_cast<size_t>(shape.at(0) * kernels::quant_row_bytes(*quant, shape.at(1)));
  return static_cast<size_t>(numel()) * static_cast<size_t>(kernels::dtype_size(dtype));
}

const WeightView* LoadedParameters::find(std::string_view target) const {
  auto it = views_.find(target);
  return it == views_.end() ? nullptr : &it->second;
}

const WeightView& LoadedParameters::at(std::string_view target) const {
  if (const WeightView* v = find(target)) return *v;
  throw WeightsError(fmt::format("no loaded parameter '{}'", target));
}

size_t LoadedParameters::owned_bytes() const {
  size_t n = 0;
  for (const auto& b : buffers_) n += b.size();
  return n;
}

size_t LoadedParameters::retain_only(const std::set<std::string, std::less<>>& keep) {
  std::erase_if(views_, [&](const auto& entry) { return !keep.contains(entry.first); });
  std::set<const void*> read;
  for (const auto& [target, v] : views_) read.insert(v.data);
  size_t freed = 0;
  std::erase_if(buffers_, [&](const AlignedBuffer& b) {
    if (read.contains(b.data())) return false;
    freed += b.size();
    return true;
  });
  return freed;
}

LoadedParameters load_parameters(const nlohmann::json& parameters, const Checkpoint& checkpoint,
                                 const LoadOptions& options) {
  if (!parameters.is_object())
    throw WeightsError(fmt::format("IR parameters table is JSON {}, not an object", parameters.type_name()));
  LoadedParameters out;
  out.files_ = checkpoint.files();

  // checkpoint key -> the view loaded for it (tied parameters reuse it)
  std::unordered_map<std::string, WeightView> by_key;
  std::map<std::string, std::string> key_of;                 // target -> key, for tied_to checks
  std::vector<std::pair<std::string, std::string>> tied;     // (target, tied_to)
  for (const auto& [target, p] : parameters.items()) {
    ParamEntry e = parse_entry(target, p);
    key_of[target] = e.key;
    if (!e.tied_to.empty()) tied.emplace_back(target, e.tied_to);
    if (e.chunk_count > 0) {  // one of several parameters packed in one tensor: never a tie
      out.views_.emplace(target, load_chunk(target, e, checkpoint, options, out.buffers_));
      continue;
    }
    if (auto it = by_key.find(e.key); it != by_key.end()) {
      if (e.shape != it->second.shape)
        throw WeightsError(fmt::format("IR parameter '{}' has shape {} but shares checkpoint key '{}' (shape {})",
                                       target, format_shape(e.shape), e.key, format_shape(it->second.shape)));
      out.views_.emplace(target, it->second);
      continue;
    }

    if (!e.keys.empty()) {
      WeightView v = load_stacked(target, e, checkpoint, options, out.buffers_);
      out.views_.emplace(target, std::move(v));
      continue;
    }
    const std::optional<TensorView> t = checkpoint.find(e.key);
    if (!t) {
      std::string recorded = e.recorded_file.empty() ? "" : fmt::format(" (capture found it in {})", e.recorded_file);
      throw WeightsError(fmt::format("{}: parameter '{}' needs checkpoint key '{}', which the checkpoint does not have{} {}",
                                     checkpoint.path().string(), target, e.key, recorded, kRecapture));
    }
    const std::string file = t->file->path().string();
    const std::string_view actual = file_dtype_name(t->dtype);
    if (e.recorded_dtype && *e.recorded_dtype != actual)
      throw WeightsError(fmt::format("tensor '{}' in {} has dtype {} but the IR expects {} {}", e.key, file, actual,
                                     *e.recorded_dtype, kRecapture));
    if (!std::equal(e.shape.begin(), e.shape.end(), t->shape.begin(), t->shape.end())) {
      // Capture recorded the checkpoint's shape: when the file still has it, re-capturing cannot
      // help; the model config.json describes is what disagrees with the checkpoint.
      const bool unchanged = e.recorded_shape && std::equal(e.recorded_shape->begin(), e.recorded_shape->end(),
                                                            t->shape.begin(), t->shape.end());
      throw WeightsError(fmt::format(
          "tensor '{}' in {} has shape {} but the IR expects {} for parameter '{}' {}", e.key, file,
          format_shape(t->shape), format_shape(e.shape), target,
          unchanged ? "(config.json disagrees with the checkpoint, which is as it was at capture: check the sizes "
                      "in config.json; re-capturing will not help)"
                    : kRecapture));
    }
    const std::optional<kernels::DType> from = kernels::storage_dtype(t->dtype);
    if (!from)
      throw WeightsError(fmt::format("tensor '{}' in {} has dtype {}; parameter '{}' needs F32, BF16 or F16", e.key,
                                     file, actual, target));

    if (auto q = policy_quant_type(options.dtype); q && options.may_quantize(target) && quantizable_shape(*q, e.shape)) {
      WeightView v = quantize_tensor(t->data, *from, e.shape, *q, out.buffers_);
      v.checkpoint_key = e.key;
      by_key.emplace(e.key, v);
      out.views_.emplace(target, std::move(v));
      continue;
    }
    WeightView v;
    v.shape = e.shape;
    v.checkpoint_key = e.key;
    v.dtype = target_dtype(*from, options);
    const int64_t n = v.numel();
    const bool aligned = reinterpret_cast<uintptr_t>(t->data) % static_cast<uintptr_t>(kernels::dtype_size(*from)) == 0;
    if (v.dtype == *from && aligned) {
      v.data = huge_page_copy(t->data, v.nbytes(), out.buffers_, v.owned);
    } else {
      AlignedBuffer& b = out.buffers_.emplace_back(static_cast<size_t>(n) * static_cast<size_t>(kernels::dtype_size(v.dtype)));
      convert_elements(t->data, *from, b.data(), v.dtype, n);
      v.data = b.data();
      v.owned = true;
    }
    by_key.emplace(e.key, v);
    out.views_.emplace(target, std::move(v));
  }

  // A tied parameter must read the same tensor as the parameter it is tied to.
  for (const auto& [target, to] : tied) {
    auto other = key_of.find(to);
    if (other != key_of.end() && other->second != key_of[target])
      throw WeightsError(fmt::format("IR parameter '{}' is tied to '{}' but reads checkpoint key '{}', not '{}'", target,
                                     to, key_of[target], other->second));
  }
  return out;
}

}  // namespace fuselm::weights
