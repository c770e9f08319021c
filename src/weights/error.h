#pragma once
// The one exception type of the weights library.
#include <filesystem>
#include <stdexcept>
#include <string>

namespace fuselm::weights {

/// Thrown for every problem with a checkpoint: an unreadable or malformed file, a tensor out of
/// bounds, a key the IR names but the checkpoint lacks, a dtype or shape that changed since
/// capture. The message is one line that names the file (or directory) and the tensor.
class WeightsError : public std::runtime_error {
 public:
  explicit WeightsError(const std::string& what) : std::runtime_error(what) {}
};

/// Throws WeightsError("<path>: <msg>"): the readers' one way to refuse a file.
[[noreturn]] inline void fail(const std::filesystem::path& path, const std::string& msg) {
  throw WeightsError(path.string() + ": " + msg);
}

}  // namespace fuselm::weights
