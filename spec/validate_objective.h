// Internal to the spec's validation: train.objective and its sections (dpo:, reward_model:, grpo:) and
// the data fields only preference pairs or prompts read.
#ifndef TESSERA_SPEC_VALIDATE_OBJECTIVE_H_
#define TESSERA_SPEC_VALIDATE_OBJECTIVE_H_

#include "spec/spec_checker.h"

namespace tessera::spec::internal {

void CheckObjective(const v1::JobSpec& s, Checker& c);
void CheckGrpo(const v1::JobSpec& s, Checker& c);

}  // namespace tessera::spec::internal

#endif  // TESSERA_SPEC_VALIDATE_OBJECTIVE_H_
