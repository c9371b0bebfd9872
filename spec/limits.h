// The documented range of every numeric spec field and the size limits of strings and lists
// (docs/security.md, "Bounds"). ValidateJobSpec refuses anything outside them, so that every product
// the system later forms from a valid spec (world size, batch, tokens per step, parameter counts) is
// exact in 64 bits and every loop over a size terminates quickly.
#ifndef TESSERA_SPEC_LIMITS_H_
#define TESSERA_SPEC_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace tessera::spec::limits {

// model
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHidden = 131072;
inline constexpr int64_t kMaxHeads = 1024;               // Also kv_heads.
inline constexpr int64_t kMaxVocab = 16777216;           // 2^24.
inline constexpr int64_t kMaxSeqLen = 1048576;           // 2^20; also rope_scaling.original_max_positions.
inline constexpr int64_t kMaxLoraRank = 4096;            // model.lora.rank.
inline constexpr int64_t kMaxFfnHidden = 4 * kMaxHidden;  // Also moe_ffn_hidden, shared_expert_ffn_hidden.
inline constexpr int64_t kMaxExperts = 1024;             // Also experts_per_token.
inline constexpr double kMaxAuxLossCoef = 1000;
// parallel
inline constexpr int64_t kMaxAxis = 4096;                // Each of tp, pp, sp, ep.
inline constexpr int64_t kMaxWorldSize = 131072;         // dp·tp·pp·sp (and parallel.devices): 100k GPUs fit.
inline constexpr int64_t kMaxDp = kMaxWorldSize;         // dp alone may span the cluster.
inline constexpr int64_t kMaxPpChunks = 64;
inline constexpr int64_t kMaxTpDepth = 64;
inline constexpr double kMaxDpBucketMb = 65536;
// train / checkpoint
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;   // Also warmup_steps, eval_every, every_steps.
inline constexpr int64_t kMaxMicroBatch = 65536;
inline constexpr int64_t kMaxGlobalBatch = 16777216;     // 2^24 samples per step.
inline constexpr int64_t kMaxEvalBatches = 1000000;
inline constexpr int64_t kMaxLossScaleWindow = 1000000000;
inline constexpr int64_t kMaxCheckpointsKept = 1000;
// strings and lists
inline constexpr size_t kMaxPathBytes = 4096;            // PATH_MAX.
inline constexpr int kMaxBlendSources = 1024;
inline constexpr size_t kMaxSpecBytes = 1 << 20;         // A YAML spec file or a spec in an RPC.

}  // namespace tessera::spec::limits

#endif  // TESSERA_SPEC_LIMITS_H_
