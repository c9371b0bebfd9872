// Finding tessera's own executables next to the running one.
#ifndef TESSERA_COMMON_PROCESS_FIND_BINARY_H_
#define TESSERA_COMMON_PROCESS_FIND_BINARY_H_

#include <string>

namespace tessera::process {

// Path of the executable `name` (e.g. "tessera-rank", whose Bazel package is `package`, e.g.
// "worker/rank"): $env_var when set, else next to /proc/self/exe, else in this executable's Bazel
// runfiles or in the bazel-bin tree beside it. "" when none exists.
std::string FindTesseraBinary(const std::string& name, const std::string& package, const char* env_var);

}  // namespace tessera::process

#endif  // TESSERA_COMMON_PROCESS_FIND_BINARY_H_
