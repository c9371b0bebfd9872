// Helpers of the libFuzzer targets that read files (tools/fuzz.sh): a scratch directory of this
// process and writing the fuzzer's bytes into a file in it.
#ifndef TESSERA_FUZZ_FUZZ_FILES_H_
#define TESSERA_FUZZ_FUZZ_FILES_H_

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessera::fuzz {

// $TMPDIR/tessera-NAME-PID, or /dev/shm/tessera-NAME-PID with `tmpfs` where /dev/shm is writable
// (for targets whose code syncs its writes). Created once, mode 0700; removed when the process exits.
inline const std::string& ScratchDir(const char* name, bool tmpfs = false) {
  static const std::string dir = [name, tmpfs] {
    const std::string base = tmpfs && access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                             : getenv("TMPDIR") != nullptr         ? getenv("TMPDIR")
                                                                   : "/tmp";
    std::string d = base + "/tessera-" + name + "-" + std::to_string(getpid());
    mkdir(d.c_str(), 0700);
    return d;
  }();
  static const bool cleanup = [] { return std::atexit([] { std::filesystem::remove_all(dir); }) == 0; }();
  (void)cleanup;
  return dir;
}

// Replaces `path` with `size` bytes of `data`; aborts if it cannot (the fuzzer's setup, not the code
// under test, failed).
inline void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && fwrite(data, 1, size, f) != size) std::abort();
  fclose(f);
}

}  // namespace tessera::fuzz

#endif  // TESSERA_FUZZ_FUZZ_FILES_H_
