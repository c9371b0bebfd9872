// SmallTmpfs: a 1 MiB tmpfs for the tests of what a full disk does to the job store — mounted under
// TEST_TMPDIR/NAME (root only), filled on demand, unmounted when it goes. Test-only.
#ifndef TESSERA_COORDINATOR_SMALL_TMPFS_H_
#define TESSERA_COORDINATOR_SMALL_TMPFS_H_

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace tessera::coordinator {

class SmallTmpfs {
 public:
  // The mounted file system, or null with *why_not saying why (not root, mount refused): skip then.
  static std::unique_ptr<SmallTmpfs> Mount(const std::string& name, std::string* why_not) {
    if (geteuid() != 0) {
      *why_not = "needs root to mount a size-limited tmpfs";
      return nullptr;
    }
    const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
    std::filesystem::create_directories(dir);
    if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) {
      *why_not = std::string("cannot mount a tmpfs here: ") + strerror(errno);
      return nullptr;
    }
    return std::unique_ptr<SmallTmpfs>(new SmallTmpfs(dir));
  }
  ~SmallTmpfs() { umount2(dir_.c_str(), MNT_DETACH); }

  const std::string& dir() const { return dir_; }
  // Writes DIR/filler until nothing more fits.
  void Fill() const {
    std::ofstream filler(dir_ + "/filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (filler.write(block.data(), block.size())) {
    }
  }
  // Removes the filler: the space is back.
  void Free() const { std::filesystem::remove(dir_ + "/filler"); }

 private:
  explicit SmallTmpfs(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_SMALL_TMPFS_H_
