#include "engine/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace fuselm::engine {

FileLock::FileLock(const std::filesystem::path& path, const char* what) {
  // O_CLOEXEC: the capture child must not inherit (and so prolong) the lock.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(fmt::format("{}: cannot create the lock file: {}", path.string(), std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (errno == EWOULDBLOCK) {
    std::fprintf(stderr, "fuselm: waiting for %s (%s)\n", what, path.c_str());
    int rc;
    do rc = ::flock(fd_, LOCK_EX);
    while (rc != 0 && errno == EINTR);
    if (rc == 0) return;
  }
  const int err = errno;
  ::close(fd_);
  throw std::runtime_error(fmt::format("{}: cannot lock: {}", path.string(), std::strerror(err)));
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace fuselm::engine
