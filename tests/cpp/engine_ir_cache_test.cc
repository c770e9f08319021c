// The IR cache key (engine/ir_cache.h) and the capture lock (engine/file_lock.h).
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fcntl.h>
#include <fstream>

#include "engine/file_lock.h"
#include "engine/ir_cache.h"
#include "weights_test_util.h"

namespace fuselm::engine {
namespace engine_ir_cache_test {

using weights::test_util::TempDir;
namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

TEST(IrCache, KeyIgnoresConfigFormattingButNotItsValues) {
  TempDir dir;
  write(dir / "config.json", R"({"a": 1, "b": [2, 3]})");
  write(dir / "model.safetensors", "12345678");
  const std::string key = model_content_key(dir.path());
  EXPECT_EQ(key.size(), 16u);
  write(dir / "config.json", "{\n  \"b\": [2, 3],\n  \"a\": 1\n}\n\n");
  EXPECT_EQ(model_content_key(dir.path()), key);
  write(dir / "config.json", R"({"a": 2, "b": [2, 3]})");
  EXPECT_NE(model_content_key(dir.path()), key);
}

TEST(IrCache, KeyFollowsTheCheckpointFiles) {
  TempDir dir;
  write(dir / "config.json", "{}");
  write(dir / "model.safetensors", "12345678");
  const std::string key = model_content_key(dir.path());
  write(dir / "tokenizer.json", "{}");  // not a checkpoint file
  EXPECT_EQ(model_content_key(dir.path()), key);
  write(dir / "model.safetensors", "123456789");  // another size
  EXPECT_NE(model_content_key(dir.path()), key);
}

TEST(IrCache, CacheRootAndDirName) {
  TempDir dir;
  const fs::path model = dir / "My-Model";
  fs::create_directories(model);
  write(model / "config.json", "{}");
  ::setenv("FUSELM_CACHE", (dir / "cache").c_str(), 1);
  EXPECT_EQ(cache_root(), dir / "cache");
  EXPECT_EQ(cache_ir_dir(model), dir / "cache" / ("My-Model-" + model_content_key(model)));
  ::unsetenv("FUSELM_CACHE");
}

TEST(IrCache, WritableProbeLeavesNothing) {
  TempDir dir;
  EXPECT_TRUE(dir_is_writable(dir.path()));
  EXPECT_TRUE(fs::is_empty(dir.path()));
  EXPECT_FALSE(dir_is_writable(dir / "absent"));
}

TEST(FileLock, ExcludesAnotherProcessUntilReleased) {
  TempDir dir;
  const fs::path lock = dir / ".capture.lock";
  auto held_elsewhere = [&] {  // can another process take the lock right now?
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
      ::_exit(fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WEXITSTATUS(status) != 0;
  };
  {
    FileLock l(lock, "a test");
    EXPECT_TRUE(held_elsewhere());
  }
  EXPECT_FALSE(held_elsewhere());
}

}  // namespace engine_ir_cache_test
}  // namespace fuselm::engine
