// Job specs: YAML text -> validated tessera.v1.JobSpec. Used by the CLI, the coordinator and the rank.
#ifndef TESSERA_SPEC_JOB_SPEC_H_
#define TESSERA_SPEC_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/spec_error.h"
#include "tessera/v1/job.pb.h"

namespace tessera::spec {

// The spec every YAML file is merged over (the defaults documented in job.proto).
v1::JobSpec DefaultJobSpec();

// Parses YAML `text`, merges it over DefaultJobSpec(), then applies `overrides` in order, each
// "dotted.path=value" with the value in YAML syntax ("train.steps=20", "train.betas=[0.9,0.99]"),
// and fills the derived defaults (output_dir, checkpoint.dir). Does not validate. On failure returns
// InvalidArgument listing one "field: reason" per line.
// `written`, when given, receives the YAML and overrides merged over an empty spec (what the user
// wrote, without defaults).
absl::StatusOr<v1::JobSpec> ParseJobSpec(std::string_view text,
                                         const std::vector<std::string>& overrides,
                                         v1::JobSpec* written = nullptr);

// model.pretrained: sets the model's family and sizes from DIR/config.json (formats/model/hf_config).
// A field also in `written` (ParseJobSpec's) must agree: the error names the field, both values and
// the file. seq_len stays the spec's (gpt2: at most n_positions; when not written, the default capped
// by n_positions). Does nothing without model.pretrained.
absl::Status ApplyPretrained(const v1::ModelSpec& written, v1::JobSpec* spec);

// Every problem of `spec`, one per field (empty when valid).
std::vector<SpecError> ValidateJobSpec(const v1::JobSpec& spec);

// Reads the YAML file at `path`, parses it with `overrides`, applies model.pretrained and validates it.
absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path,
                                        const std::vector<std::string>& overrides);

// dp·tp·pp·sp, exact for a valid spec (at most limits::kMaxWorldSize); for any other spec 0 when a
// factor is not positive and saturated at INT64_MAX instead of wrapping.
int64_t WorldSize(const v1::JobSpec& spec);

// samples per step / (micro_batch·dp): micro-batches each rank runs per step (layout::MicroBatchesPerStep;
// 0 when micro_batch·dp does not divide global_batch, which validation refuses).
int AccumulationSteps(const v1::JobSpec& spec);

}  // namespace tessera::spec

#endif  // TESSERA_SPEC_JOB_SPEC_H_
