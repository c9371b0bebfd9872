// Where a job may read and write (docs/security.md, "Paths"). The coordinator and every worker are
// given roots: data roots that inputs (data, validation data, blend sources, init_from, pretrained)
// must lie in, and an output root that output_dir and checkpoint.dir must lie in — with TLS, inside
// the submitting user's own OUTPUT_ROOT/USER. A cluster job's paths must also be absolute and
// normalised: no NUL byte, no "." or ".." component, no empty component, no trailing '/'.
#ifndef TESSERA_SPEC_PATHS_H_
#define TESSERA_SPEC_PATHS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/spec_error.h"
#include "tessera/v1/job.pb.h"

namespace tessera::spec {

struct PathRoots {
  std::vector<std::string> data;  // Absolute, normalised directories. Empty: inputs are not confined.
  std::string output;             // Absolute, normalised directory. Empty: outputs are not confined.
  bool empty() const { return data.empty() && output.empty(); }
};

// Parses --data_roots (comma-separated) and --output_root: each must be an absolute, normalised
// path (an existing directory is not required here). Errors name the flag.
absl::StatusOr<PathRoots> ParsePathRoots(const std::string& data_roots, const std::string& output_root);

// "field: reason" when `path` is not absolute and normalised (see above), else nothing.
std::vector<SpecError> CheckPathShape(const std::string& field, const std::string& path);

// Whether `path` is `root` or lies below it (both normalised; a plain string comparison by components).
bool PathWithin(const std::string& path, const std::string& root);

// Makes every path field of `spec` that is set and relative (inputs and outputs, the LoRA adapter to
// start from too) absolute against `cwd` (absolute itself) and lexically normalised, trailing '/'
// dropped: paths in a spec are relative to where the user stands, while ranks, checkpoints and exported
// adapters use them elsewhere (the base a LoRA checkpoint names is read by `tessera generate` from any
// directory). Absolute paths are kept as written (a cluster checks their shape: CheckJobPaths).
void MakePathsAbsolute(v1::JobSpec* spec, const std::string& cwd);

// The spec's input and output path fields that are set, as (field, path).
std::vector<std::pair<std::string, std::string>> InputPaths(const v1::JobSpec& spec);
std::vector<std::pair<std::string, std::string>> OutputPaths(const v1::JobSpec& spec);

// Every problem of a cluster job's paths: shape, and confinement to `roots` (outputs inside
// ROOTS.output/OWNER when `owner` is not empty). Checks strings only; see CheckResolvedPaths.
std::vector<SpecError> CheckJobPaths(const v1::JobSpec& spec, const PathRoots& roots, const std::string& owner);

// On the machine that opens the files: every path (or, where it does not exist yet, its deepest
// existing ancestor) resolved through symbolic links must still lie inside its root (resolved too).
std::vector<SpecError> CheckResolvedPaths(const v1::JobSpec& spec, const PathRoots& roots, const std::string& owner);

// What the coordinator (on submission) and a worker (before a rank starts) check: nothing when
// `roots` is empty; else CheckJobPaths, and once the strings pass, CheckResolvedPaths.
std::vector<SpecError> ConfineJobPaths(const v1::JobSpec& spec, const PathRoots& roots, const std::string& owner);

}  // namespace tessera::spec

#endif  // TESSERA_SPEC_PATHS_H_
