// docs/ops.md is generated from the op registry: this test renders the list from
// OpRegistry::builtin() and fails when docs/ops.md (or capture's copy of the names,
// python/fuselm_capture/engine_ops.txt) differs. To regenerate after adding an op:
//   FUSELM_WRITE_OPS_MD=1 build/fuselm_tests --gtest_filter=OpsDoc.*
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/op_registry.h"

namespace fuselm::runtime {
namespace ops_doc_test {

std::string render() {
  const auto names = OpRegistry::builtin().names();
  std::ostringstream out;
  out << "# Ops\n\n"
      << "Generated from `OpRegistry::builtin()` by `tests/cpp/ops_doc_test.cc` (do not edit by hand;\n"
      << "`FUSELM_WRITE_OPS_MD=1 build/fuselm_tests --gtest_filter=OpsDoc.*` rewrites it). Every op below\n"
      << "has a reference case in `tests/cpp/runtime_ops_test.cc` (`RuntimeOps.EveryRegisteredOpHasACase`\n"
      << "fails otherwise): the op run in a hand-built graph on contiguous, transposed and strided inputs\n"
      << "against loops written from PyTorch's semantics. Every op also has a case in\n"
      << "`tests/python/test_ops_torch.py`, which captures a one-op module through the capture path, runs\n"
      << "it in the generic interpreter (`build/fuselm_run_graph`) and compares it with torch itself\n"
      << "(odd sizes, broadcasting, views, 0-d and empty tensors, integer and bool dtypes, symbolic sizes;\n"
      << "the fuselm ops that fusers put in or that need the KV cache or a communicator name the tests\n"
      << "that check them instead).\n"
      << "`aten.*` ops are the ATen operators captured\n"
      << "graphs hold; `fuselm.*` ops are put in by capture (attention, experts) or by the fusers\n"
      << "(`docs/fusers.md`). An op missing here stops loading with a one-line error naming it and its module.\n\n";
  for (const char* ns : {"aten", "fuselm"}) {
    size_t n = 0;
    std::string list;
    for (const auto& name : names) {
      if (name.rfind(std::string(ns) + ".", 0) != 0) continue;
      list += "- `" + name + "`\n";
      ++n;
    }
    out << "## " << ns << " (" << n << ")\n\n" << list << "\n";
  }
  size_t other = 0;
  for (const auto& name : names) other += name.rfind("aten.", 0) != 0 && name.rfind("fuselm.", 0) != 0;
  if (other) {
    out << "## other\n\n";
    for (const auto& name : names)
      if (name.rfind("aten.", 0) != 0 && name.rfind("fuselm.", 0) != 0) out << "- `" << name << "`\n";
    out << "\n";
  }
  return out.str();
}

// Checks that the file at `rel` (under the source tree) holds `want`, or writes it when
// FUSELM_WRITE_OPS_MD is set.
void expect_generated(const std::string& rel, const std::string& want) {
  const std::string path = std::string(FUSELM_SOURCE_DIR) + rel;
  if (std::getenv("FUSELM_WRITE_OPS_MD")) {
    std::ofstream(path) << want;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing; run FUSELM_WRITE_OPS_MD=1 build/fuselm_tests --gtest_filter=OpsDoc.*";
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), want) << path << " is out of date with the op registry; regenerate it (see the test's header)";
}

TEST(OpsDoc, DocsOpsMdListsTheRegistry) { expect_generated("/docs/ops.md", render()); }

// python/fuselm_capture/engine_ops.txt: the registry's names, one a line, which capture reads to
// decompose the ops the engine lacks (python/fuselm_capture/decompose.py). Same regeneration.
TEST(OpsDoc, CaptureEngineOpsListIsTheRegistry) {
  std::string want;
  for (const auto& name : OpRegistry::builtin().names()) want += name + "\n";
  expect_generated("/python/fuselm_capture/engine_ops.txt", want);
}

}  // namespace ops_doc_test
}  // namespace fuselm::runtime
