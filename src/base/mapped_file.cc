#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace fuselm::base {

namespace {
[[noreturn]] void fail_closing(int fd, const std::string& why) {
  ::close(fd);
  throw MapError(why);
}
}  // namespace

MappedFile MappedFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw MapError(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_closing(fd, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail_closing(fd, "not a regular file");
  MappedFile f;
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ == 0) {
    ::close(fd);
    return f;
  }
  void* m = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (m == MAP_FAILED)
    throw MapError("cannot mmap " + std::to_string(f.size_) + " bytes: " + std::strerror(map_err));
  f.map_ = m;
  return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    unmap();
    map_ = std::exchange(o.map_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::will_need() const {
  if (map_ != nullptr) ::madvise(map_, size_, MADV_WILLNEED);
}

void MappedFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, size_);
  map_ = nullptr;
}

}  // namespace fuselm::base
