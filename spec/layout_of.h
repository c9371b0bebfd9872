// The ParallelLayout (layout/parallel_layout.h) of a spec: the one conversion from the proto's
// parallel section, used by validation, the coordinator's placement, the launchers and the rank.
#ifndef TESSERA_SPEC_LAYOUT_OF_H_
#define TESSERA_SPEC_LAYOUT_OF_H_

#include <vector>

#include "spec/spec_error.h"
#include "layout/check_layout.h"
#include "layout/parallel_layout.h"
#include "tessera/v1/job.pb.h"

namespace tessera::spec {

// Exact for a valid spec. A field a spec leaves unspecified (or, for parallel.order, names wrongly)
// takes the layout's default and, when `problems` is non-null, is listed there with its field.
// Enum values no enumerator has are not listed: ValidateJobSpec reports them for every field.
layout::ParallelLayout LayoutOf(const v1::JobSpec& spec, std::vector<SpecError>* problems = nullptr);

// The spec's train.precision; fp32 when unspecified.
layout::Precision PrecisionOf(const v1::JobSpec& spec);

// The spec's device, whether train.precision is fp8 and train.objective: what CheckLayout's target
// rules read.
layout::Target TargetOf(const v1::JobSpec& spec);

// train.micro_batch and train.global_batch (with train.objective grpo: global_batch × grpo.num_generations,
// the step's completions).
layout::BatchShape BatchOf(const v1::JobSpec& spec);

// Writes `layout`'s sizes, modes and pipeline split into `parallel` (what `parallel: auto` chooses);
// the order and the ZeRO stage stay the spec's.
void SetLayout(const layout::ParallelLayout& layout, v1::ParallelSpec* parallel);

}  // namespace tessera::spec

#endif  // TESSERA_SPEC_LAYOUT_OF_H_
