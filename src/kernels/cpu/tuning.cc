#include "kernels/cpu/tuning.h"

#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "kernels/cpu/isa.h"

namespace fuselm::kernels {
namespace {

// The vendor from isa.cc's one CPUID read.
CpuVendor detect_vendor() { return cpu_vendor() == "AuthenticAMD" ? CpuVendor::amd : CpuVendor::intel; }

CpuTuning decide() {
  const char* env = std::getenv("FUSELM_CPU_TUNING");
  if (!env || !*env) return tuning_for(detect_vendor());
  return parse_tuning(env, detect_vendor());
}

// The settings a FUSELM_CPU_TUNING spec may name, one place for the parser and its error message.
struct Setting {
  std::string_view name;
  void (*apply)(CpuTuning&, int);
};
constexpr Setting kSettings[] = {
    {"gemv_memory_order", [](CpuTuning& t, int v) { t.gemv_memory_order = v != 0; }},
    {"packed_decode_prefetch", [](CpuTuning& t, int v) { t.packed_decode_prefetch = v; }},
    {"gemv_prefetch", [](CpuTuning& t, int v) { t.gemv_prefetch = v; }},
    {"gemv_streams", [](CpuTuning& t, int v) { t.gemv_streams = v; }},
};

const Setting* find_setting(std::string_view name) {
  for (const Setting& s : kSettings)
    if (s.name == name) return &s;
  return nullptr;
}

std::string setting_names() {
  std::string names;
  for (const Setting& s : kSettings) names += std::string(names.empty() ? "" : ", ") + std::string(s.name);
  return names;
}

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < 0 || value > (1 << 20)) return std::nullopt;
  return value;
}

CpuTuning& current() {
  static CpuTuning t = decide();  // thread-safe, once
  return t;
}

}  // namespace

CpuTuning tuning_for(CpuVendor vendor) {
  CpuTuning t;
  t.vendor = vendor;
  t.gemv_memory_order = vendor == CpuVendor::amd;
  t.packed_decode_prefetch = vendor == CpuVendor::amd ? 1024 : 0;
  t.gemv_prefetch = vendor == CpuVendor::amd ? 1024 : 0;
  t.gemv_streams = vendor == CpuVendor::amd ? 4 : 1;
  return t;
}

CpuTuning parse_tuning(std::string_view spec, CpuVendor detected) {
  const auto fail = [&](std::string_view why) {
    return std::invalid_argument(fmt::format("FUSELM_CPU_TUNING='{}': {}", spec, why));
  };
  CpuTuning t = tuning_for(detected);
  bool first = true;
  for (std::string_view rest = spec; first || !rest.empty(); first = false) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      const std::optional<CpuVendor> vendor = parse_vendor(item);
      if (!vendor || !first) throw fail("expected intel or amd, then key=value settings separated by commas");
      t = tuning_for(*vendor);
      continue;
    }
    const std::optional<int> value = parse_int(item.substr(eq + 1));
    if (!value) throw fail(fmt::format("'{}' needs a whole number from 0 to 1048576", item));
    const Setting* setting = find_setting(item.substr(0, eq));
    if (!setting) throw fail(fmt::format("unknown setting '{}' (known: {})", item.substr(0, eq), setting_names()));
    setting->apply(t, *value);
  }
  if (t.gemv_streams != 1 && t.gemv_streams != 2 && t.gemv_streams != 4 && t.gemv_streams != 8)
    throw fail("gemv_streams must be 1, 2, 4 or 8");
  return t;
}

const char* vendor_name(CpuVendor vendor) { return vendor == CpuVendor::amd ? "amd" : "intel"; }

std::optional<CpuVendor> parse_vendor(std::string_view name) {
  if (name == "intel") return CpuVendor::intel;
  if (name == "amd") return CpuVendor::amd;
  return std::nullopt;
}

const CpuTuning& cpu_tuning() { return current(); }

ScopedCpuTuning::ScopedCpuTuning(const CpuTuning& tuning) : previous_(current()) { current() = tuning; }

ScopedCpuTuning::~ScopedCpuTuning() { current() = previous_; }

}  // namespace fuselm::kernels
