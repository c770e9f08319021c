#pragma once
// The rows of `fuselm bench` and their printers, in llama-bench's formats and field names
// (tools/llama-bench/llama-bench.cpp of llama.cpp), so that one script reads both tools' output.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace fuselm::cli {

/// One test of one configuration: pp<n_prompt>, tg<n_gen>, optionally "@ d<n_depth>".
struct BenchRow {
  // What ran (llama-bench's fields).
  std::string model_filename;  // the model directory (or file) as given
  std::string model_type;      // "<config model_type> <params> <WEIGHT_DTYPE>", as llama-bench's model_type
  int64_t model_size = 0;      // bytes of weights in memory
  int64_t model_n_params = 0;  // parameters the graph reads (tied weights once)
  int64_t n_batch = 0, n_ubatch = 0;
  int n_threads = 0;
  std::string type_k = "f32", type_v = "f32";  // KV cache element type
  int64_t n_prompt = 0, n_gen = 0, n_depth = 0;
  std::string test_time;             // RFC 3339, when the test started
  std::vector<int64_t> samples_ns;   // one per repetition
  // fuselm's own fields.
  std::string weight_dtype;          // --dtype as given: auto, f32, bf16, ...
  std::string weight_types;          // what the weights are in memory: "Q4_0 77% Q6_K 22% F32 1%"
  std::string isa;                   // kernel path (FUSELM_CPU_ISA)
  int64_t weight_bytes_per_token = 0;  // weight bytes read per decoded token (embedding tables: one row)
  int64_t kv_bytes_per_token = 0;      // KV cache bytes read per decoded token at this test's mean depth
  double mem_bw_gbs = 0;               // measured memory bandwidth at n_threads, GB/s (1e9 B/s)
  std::string mem_bw_method;           // how it was measured

  /// "pp512", "tg128", "tg128 @ d4096" (llama-bench's test names).
  std::string test_name() const;
  /// Tokens/s of each sample: (n_prompt + n_gen) / seconds, as llama-bench.
  std::vector<double> samples_ts() const;
  double avg_ns() const;
  double stddev_ns() const;  // sample standard deviation (n - 1), 0 for one sample
  double avg_ts() const;
  double stddev_ts() const;
  /// Decode ceiling in tokens/s: bandwidth / (weight + KV bytes per token); 0 without a bandwidth.
  double decode_ceiling_ts() const;
  /// avg_ts as a percentage of decode_ceiling_ts for tg tests; -1 for pp tests.
  double pct_of_ceiling() const;
};

enum class BenchFormat { md, json, jsonl, csv };

/// "md" | "json" | "jsonl" | "csv"; throws std::runtime_error naming -o otherwise.
BenchFormat parse_bench_format(const std::string& name);

/// Streams rows as they finish: header(), row() per test, footer().
class BenchPrinter {
 public:
  BenchPrinter(BenchFormat format, std::FILE* out) : format_(format), out_(out) {}
  void header();
  void row(const BenchRow& r);
  /// md: the bytes per token, bandwidth and ceiling lines under the table; json: closes the array.
  void footer(const std::vector<BenchRow>& rows);

 private:
  BenchFormat format_;
  std::FILE* out_;
  int count_ = 0;
};

/// Field names of the csv/json/jsonl rows, in order (llama-bench's names first).
const std::vector<std::string>& bench_fields();

}  // namespace fuselm::cli
