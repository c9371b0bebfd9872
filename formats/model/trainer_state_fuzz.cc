// libFuzzer target (tools/fuzz.sh trainer_state): a checkpoint's trainer_state.json from arbitrary
// bytes (ParseTrainerState, as a resumed rank, `tessera export` and `tessera generate` read it), and
// the sizes of the model it names. Property: no crash, no exception, no sanitizer report (signed
// overflow included), no hang; a state that parses names sizes within kMaxTrainerStateSize.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "formats/model/trainer_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::formats::model;  // NOLINT: one function.
  auto state = ParseTrainerState(std::string_view(reinterpret_cast<const char*>(data), size), "trainer_state.json");
  if (!state.ok()) return 0;
  const ModelConfig& c = state->model;
  for (int v : {c.layers, c.hidden, c.heads, c.vocab, c.seq_len}) {
    if (v < 1 || v > kMaxTrainerStateSize) std::abort();
  }
  if (c.HeadDim() < 1 || c.KvHeads() < 1 || c.FfnHidden() < 1) std::abort();
  if (!(c.TrainingFlopsPerToken() > 0)) std::abort();
  return 0;
}
