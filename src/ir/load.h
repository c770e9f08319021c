#pragma once
// Reading and checking an IR file written by python/fuselm_capture.
#include <filesystem>

#include "ir/graph.h"

namespace fuselm::ir {

/// The IR format version this engine reads; capture writes the same number.
inline constexpr int kIrVersion = 1;
/// The capture package version whose IR this engine expects (python/fuselm_capture/__init__.py).
inline constexpr const char* kCaptureVersion = "0.6.0";  // 0.6.0: attention layer_idx in graph order (a KV layer per call); 0.5.0: text config of wrappers, read parameters only, unread_modules; 0.4.0: attention alibi_slopes; 0.3.0: attention chunk_size, mask; 0.2.0: experts alpha/limit, checkpoint stacks

/// Loads path (ir.json). Throws std::runtime_error, one line naming the file and what is wrong:
/// unreadable or malformed JSON, another format or version, a node or field that does not parse.
Graph load(const std::filesystem::path& path);

/// Structural checks: references point backwards (topological order), outputs exist, module
/// indices are in range. Throws std::runtime_error naming the node.
void verify(const Graph& g);

}  // namespace fuselm::ir
