#pragma once
// An exclusive advisory lock (flock) on a file, held for the object's lifetime: two processes that
// both find no IR capture one after the other, and the second finds the first one's result.
#include <filesystem>

namespace fuselm::engine {

class FileLock {
 public:
  /// Creates `path` if needed and blocks until the lock is ours. When another process holds it,
  /// prints "fuselm: waiting for <what> (<path>)" to stderr first. Throws std::runtime_error naming
  /// the file when it cannot be created or locked.
  FileLock(const std::filesystem::path& path, const char* what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace fuselm::engine
