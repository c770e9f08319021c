#include "cli/bench_report.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "engine/capture_runner.h"

namespace fuselm::cli {
namespace {

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Sample standard deviation, as llama-bench's stdev (n - 1 in the denominator).
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

std::vector<double> as_double(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// "model name" of /proc/cpuinfo (llama-bench's cpu_info), or "unknown".
const std::string& cpu_info() {
  static const std::string name = [] {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
        std::string v = line.substr(line.find(':') + 1);
        return v.substr(v.find_first_not_of(' '));
      }
    return std::string("unknown");
  }();
  return name;
}

// The source tree's commit (llama-bench's build_commit), or "unknown" outside a git checkout.
const std::string& build_commit() {
  static const std::string commit = [] {
    const std::string cmd =
        fmt::format("git -C '{}' rev-parse --short HEAD 2>/dev/null", engine::source_dir().string());
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> p(popen(cmd.c_str(), "r"), pclose);
    char buf[64] = {0};
    if (!p || !std::fgets(buf, sizeof buf, p.get())) return std::string("unknown");
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s.empty() ? std::string("unknown") : s;
  }();
  return commit;
}

nlohmann::ordered_json row_json(const BenchRow& r) {
  nlohmann::ordered_json j;
  j["build_commit"] = build_commit();
  j["build_number"] = 0;
  j["cpu_info"] = cpu_info();
  j["gpu_info"] = "";
  j["backends"] = "CPU";
  j["model_filename"] = r.model_filename;
  j["model_type"] = r.model_type;
  j["model_size"] = r.model_size;
  j["model_n_params"] = r.model_n_params;
  j["n_batch"] = r.n_batch;
  j["n_ubatch"] = r.n_ubatch;
  j["n_threads"] = r.n_threads;
  j["type_k"] = r.type_k;
  j["type_v"] = r.type_v;
  j["n_prompt"] = r.n_prompt;
  j["n_gen"] = r.n_gen;
  j["n_depth"] = r.n_depth;
  j["test_time"] = r.test_time;
  j["avg_ns"] = static_cast<int64_t>(std::llround(r.avg_ns()));
  j["stddev_ns"] = static_cast<int64_t>(std::llround(r.stddev_ns()));
  j["avg_ts"] = r.avg_ts();
  j["stddev_ts"] = r.stddev_ts();
  j["weight_dtype"] = r.weight_dtype;
  j["weight_types"] = r.weight_types;
  j["isa"] = r.isa;
  j["weight_bytes_per_token"] = r.weight_bytes_per_token;
  j["kv_bytes_per_token"] = r.kv_bytes_per_token;
  j["mem_bw_gbs"] = r.mem_bw_gbs;
  j["mem_bw_method"] = r.mem_bw_method;
  j["decode_ceiling_ts"] = r.decode_ceiling_ts();
  j["pct_of_ceiling"] = r.pct_of_ceiling();
  return j;
}

std::string csv_escape(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_value(const nlohmann::ordered_json& v) {
  if (v.is_string()) return csv_escape(v.get<std::string>());
  return v.dump();
}

std::string size_text(int64_t bytes) {
  const double mib = static_cast<double>(bytes) / 1024.0 / 1024.0;
  return mib < 1024 ? fmt::format("{:.2f} MiB", mib) : fmt::format("{:.2f} GiB", mib / 1024.0);
}

std::string params_text(int64_t n) {
  return n < 1000000000 ? fmt::format("{:.2f} M", n / 1e6) : fmt::format("{:.2f} B", n / 1e9);
}

}  // namespace

std::string BenchRow::test_name() const {
  std::string s = n_prompt > 0 && n_gen == 0   ? fmt::format("pp{}", n_prompt)
                  : n_gen > 0 && n_prompt == 0 ? fmt::format("tg{}", n_gen)
                                               : fmt::format("pp{}+tg{}", n_prompt, n_gen);
  if (n_depth > 0) s += fmt::format(" @ d{}", n_depth);
  return s;
}

std::vector<double> BenchRow::samples_ts() const {
  std::vector<double> ts;
  for (int64_t ns : samples_ns) ts.push_back(1e9 * static_cast<double>(n_prompt + n_gen) / static_cast<double>(ns));
  return ts;
}

double BenchRow::avg_ns() const { return mean(as_double(samples_ns)); }
double BenchRow::stddev_ns() const { return stddev(as_double(samples_ns)); }
double BenchRow::avg_ts() const { return mean(samples_ts()); }
double BenchRow::stddev_ts() const { return stddev(samples_ts()); }

double BenchRow::decode_ceiling_ts() const {
  const int64_t bytes = weight_bytes_per_token + kv_bytes_per_token;
  return mem_bw_gbs > 0 && bytes > 0 ? mem_bw_gbs * 1e9 / static_cast<double>(bytes) : 0.0;
}

double BenchRow::pct_of_ceiling() const {
  const double c = decode_ceiling_ts();
  return n_gen > 0 && n_prompt == 0 && c > 0 ? 100.0 * avg_ts() / c : -1.0;
}

BenchFormat parse_bench_format(const std::string& name) {
  if (name == "md") return BenchFormat::md;
  if (name == "json") return BenchFormat::json;
  if (name == "jsonl") return BenchFormat::jsonl;
  if (name == "csv") return BenchFormat::csv;
  throw std::runtime_error("-o " + name + ": the output format is md, json, jsonl or csv");
}

const std::vector<std::string>& bench_fields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> f;
    const auto j = row_json(BenchRow{});  // named: items() refers to it
    for (const auto& [k, v] : j.items()) f.push_back(k);
    return f;
  }();
  return fields;
}

void BenchPrinter::header() {
  if (format_ == BenchFormat::csv) {
    std::string line;
    for (const auto& f : bench_fields()) line += (line.empty() ? "" : ",") + f;
    std::fprintf(out_, "%s\n", line.c_str());
  } else if (format_ == BenchFormat::json) {
    std::fprintf(out_, "[\n");
  } else if (format_ == BenchFormat::md) {
    std::fprintf(out_, "| %-30s | %10s | %10s | %-7s | %7s | %-6s | %15s | %20s | %9s |\n", "model", "size", "params",
                 "backend", "threads", "dtype", "test", "t/s", "% ceiling");
    std::fprintf(out_, "| %s | %s: | %s: | %s | %s: | %s | %s: | %s: | %s: |\n", std::string(30, '-').c_str(),
                 std::string(9, '-').c_str(), std::string(9, '-').c_str(), std::string(7, '-').c_str(),
                 std::string(6, '-').c_str(), std::string(6, '-').c_str(), std::string(14, '-').c_str(),
                 std::string(19, '-').c_str(), std::string(8, '-').c_str());
  }
  std::fflush(out_);
}

void BenchPrinter::row(const BenchRow& r) {
  const auto j = row_json(r);
  if (format_ == BenchFormat::csv) {
    std::string line;
    for (const auto& [k, v] : j.items()) line += (line.empty() ? "" : ",") + csv_value(v);
    std::fprintf(out_, "%s\n", line.c_str());
  } else if (format_ == BenchFormat::json || format_ == BenchFormat::jsonl) {
    auto full = j;
    full["samples_ns"] = r.samples_ns;
    full["samples_ts"] = r.samples_ts();
    const std::string text = format_ == BenchFormat::json ? full.dump(2) : full.dump();
    std::fprintf(out_, "%s%s", format_ == BenchFormat::json && count_ > 0 ? ",\n" : "", text.c_str());
    if (format_ == BenchFormat::jsonl) std::fprintf(out_, "\n");
  } else {
    const double pct = r.pct_of_ceiling();
    const std::string ts = fmt::format("{:.2f} ± {:.2f}", r.avg_ts(), r.stddev_ts());
    // "±" is two bytes in UTF-8: one more column of padding keeps the table aligned.
    std::fprintf(out_, "| %-30s | %10s | %10s | %-7s | %7d | %-6s | %15s | %21s | %9s |\n", r.model_type.c_str(),
                 size_text(r.model_size).c_str(), params_text(r.model_n_params).c_str(), "CPU", r.n_threads,
                 r.weight_dtype.c_str(), r.test_name().c_str(), ts.c_str(),
                 pct < 0 ? "" : fmt::format("{:.1f} %", pct).c_str());
  }
  ++count_;
  std::fflush(out_);
}

void BenchPrinter::footer(const std::vector<BenchRow>& rows) {
  if (format_ == BenchFormat::json) std::fprintf(out_, "\n]\n");
  if (format_ != BenchFormat::md) return;
  std::fprintf(out_, "\n");
  std::string last;
  for (const auto& r : rows) {
    const std::string line = fmt::format(
        "{} {} threads {}: weights read per decoded token {:.1f} MB; memory bandwidth {:.1f} GB/s ({}); "
        "decode ceiling {:.1f} tok/s at depth 0",
        r.weight_dtype, r.model_type, r.n_threads, r.weight_bytes_per_token / 1e6, r.mem_bw_gbs, r.mem_bw_method,
        r.mem_bw_gbs * 1e9 / static_cast<double>(std::max<int64_t>(r.weight_bytes_per_token, 1)));
    if (line != last) std::fprintf(out_, "%s\n", line.c_str());
    last = line;
  }
  std::fprintf(out_, "%% ceiling: tg tokens/s over bandwidth / (weight bytes + KV bytes read at the test's mean depth); "
                     "build: %s, kernels %s\n",
               build_commit().c_str(), rows.empty() ? "?" : rows.front().isa.c_str());
  std::fflush(out_);
}

}  // namespace fuselm::cli
