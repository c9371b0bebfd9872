// libFuzzer target (tools/fuzz.sh): a job spec from arbitrary bytes, as YAML text (ParseJobSpec) and
// as an encoded JobSpec message (what an RPC carries), through validation, the world size and the
// path checks. Property: no crash, no sanitizer report, no hang; a spec that validates has a world
// size within the limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "spec/job_spec.h"
#include "spec/limits.h"
#include "spec/paths.h"

namespace {

void Exercise(const tessera::v1::JobSpec& spec) {
  const bool valid = tessera::spec::ValidateJobSpec(spec).empty();
  const int64_t world = tessera::spec::WorldSize(spec);
  if (valid && (world < 1 || world > tessera::spec::limits::kMaxWorldSize)) std::abort();
  tessera::spec::PathRoots roots{{"/data"}, "/out"};
  tessera::spec::CheckJobPaths(spec, roots, "user");
  if (valid) tessera::spec::AccumulationSteps(spec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // The first byte picks the reading: YAML text, or a binary JobSpec as in SubmitJobRequest.spec.
  if (size > 0 && data[0] == 0) {
    tessera::v1::JobSpec spec;
    if (spec.ParseFromString(bytes.substr(1))) Exercise(spec);
    return 0;
  }
  auto spec = tessera::spec::ParseJobSpec(bytes, {});
  if (spec.ok()) Exercise(*spec);
  return 0;
}
