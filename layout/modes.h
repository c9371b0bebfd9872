// The modes of a parallel layout and of training precision, as enums (never strings inside the
// engine or the control plane). Each has one spelling — the YAML one of proto/tessera/v1/job.proto,
// also written into trainer_state.json and shown by `tessera plan` — with Name() to print it and
// Parse*() to read it back. No torch and no proto here.
#ifndef TESSERA_LAYOUT_MODES_H_
#define TESSERA_LAYOUT_MODES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace tessera::layout {

// How the tp group splits the model.
//   k1D    Megatron: heads and MLP columns split, activations replicated.
//   k2D    a q×q grid (tp = q², axes i, j): activations split by samples over i and by hidden over j,
//          linear weights in SUMMA blocks (i, j), norms, biases and embeddings split by hidden over j.
//   k2p5D  Tesseract: d layers of the 2D grid (tp = d·q², axes k, i, j): samples split over (k, i),
//          every layer holds the same 2D blocks (their gradients summed over k).
//   k3D    a q×q×q cube (axes x, y, z): between blocks, samples split over (x, y) and hidden over z;
//          each linear gathers its input over one axis and its weight over x and reduce-scatters its
//          output over the third (parallel/layers/tp3d_ops.h).
enum class TpMode { k1D, k2D, k2p5D, k3D };

// Sequence parallelism (sp > 1).
enum class SpMode {
  kRing,      // Ring self-attention: keys/values passed around the sp group.
  kAllToAll,  // Ulysses: heads scattered and the sequence gathered by all-to-all.
};

// The order of one pipeline rank's forward and backward passes (layout/schedule.h).
enum class PipeSchedule {
  kOneFOneB,     // 1F1B, one model chunk per stage.
  kInterleaved,  // Megatron's interleaved 1F1B over ≥ 2 chunks per stage.
  kZeroBubbleH1, // ZB-H1: 1F1B's memory, backwards split into B and W, the W's in the bubbles.
  kZeroBubbleV,  // ZB-V: two chunks per stage in a V (stage r holds r and 2·pp−1−r), split backwards.
};

// What a rank computes on (cpu, or cuda:local_rank).
enum class DeviceKind { kCpu, kCuda };

// Parameters and activations; master weights, optimizer state and the loss stay fp32.
enum class Precision { kFp32, kBf16, kFp16 };

// How an FP8 linear layer scales its GEMM operands (parallel/layers/fp8_linear.h), with the current
// amax: one scale per tensor (x, W e4m3; gradients e5m2), or one per row along each GEMM's
// contraction (all e4m3, power-of-two scales). torchao's recipes of the same names.
enum class Fp8Recipe { kTensorwise, kRowwise };

// train.precision fp8: bf16 parameters and activations with the transformer blocks' linear GEMMs in
// FP8.
struct Fp8Options {
  Fp8Recipe recipe = Fp8Recipe::kTensorwise;
  // A linear layer whose input (K) or output (N) features are fewer stays in its own dtype.
  int64_t min_dim = 256;
  // A linear layer whose weight's name (transformers' name, e.g. "model.layers.0.mlp.down_proj.weight";
  // a layer's experts as "model.layers.N.mlp.experts") contains one of these stays in its own dtype.
  std::vector<std::string> filter;
};

// What a step's loss is (train.objective; parallel/objectives): the mean cross-entropy of the samples'
// targets (pretraining, SFT), DPO's over pairs of completions, or a reward model's over the scores
// of pairs of completions, or GRPO's over completions it samples itself (docs/post-training.md).
enum class Objective { kCrossEntropy, kDpo, kReward, kGrpo };

// DPO's loss of one pair (TRL 0.24's DPOTrainer loss types; parallel/objectives/preference_loss.h).
enum class DpoLossType {
  kSigmoid,  // −(1 − ls)·logσ(β·h) − ls·logσ(−β·h), h = (π_c − π_r) − (ρ_c − ρ_r). Log-probabilities:
             // sums over the completion's tokens.
  kIpo,      // (h − 1/(2β))², with per-token means of the log-probabilities (label smoothing does not
             // apply).
};

// What ZeRO shards over the replicas of a parameter (dp × sp), cumulatively (parallel/zero).
enum class ZeroStage {
  kNone = 0,            // Nothing sharded: every replica holds everything.
  kOptimizerState = 1,  // AdamW state and fp32 master weights.
  kGradients = 2,       // ... and gradients.
  kParameters = 3,      // ... and parameters, gathered per block just before use.
};

// "cross_entropy", "dpo", "reward".
const char* Name(Objective objective);
// "1d", "2d", "2.5d", "3d".
const char* Name(TpMode mode);
// "ring", "all_to_all".
const char* Name(SpMode mode);
// "1f1b", "interleaved", "zb1p", "zbv".
const char* Name(PipeSchedule schedule);
// Whether `schedule` splits every backward into B and W (zb1p, zbv).
bool IsZeroBubble(PipeSchedule schedule);
// "fp32", "bf16", "fp16".
const char* Name(Precision precision);

// The inverse of Name(); InvalidArgument naming the value and the accepted ones otherwise.
absl::StatusOr<TpMode> ParseTpMode(absl::string_view name);
absl::StatusOr<SpMode> ParseSpMode(absl::string_view name);
absl::StatusOr<PipeSchedule> ParsePipeSchedule(absl::string_view name);
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);
// 0..3; InvalidArgument otherwise.
absl::StatusOr<ZeroStage> ZeroStageOf(int stage);

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_MODES_H_
