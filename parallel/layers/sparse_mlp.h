// A Mixture-of-Experts MLP (a "sparse block", docs/models.md "Mixture of Experts"), as transformers'
// MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock compute it: router logits
// x·Rᵀ (no bias), softmax in fp32, the top-k experts of each token, their weights renormalised to sum
// to 1 when norm_topk_prob, cast back to x's dtype; each expert a SwiGLU MLP; the token's output the
// weighted sum of its experts' outputs, plus sigmoid(x·gᵀ)·shared_expert(x) when there is a shared
// expert. Dropless: every token reaches its k experts.
//
// Compute: the (token, expert) assignments sorted by expert (stable), one GEMM chain per expert over
// its contiguous rows — every expert runs, an empty one on zero rows, so each has a gradient every
// pass — and the weighted outputs added back per token in expert order (transformers' order).
//
// Expert parallelism: `ep` ranks hold E/ep experts each (rank r: r·E/ep ..); every rank routes its
// own tokens over all E experts, sends each assignment's row to its expert's rank (an all-to-all of
// per-expert counts, then one of the rows, uneven), the experts run on the rows they received, and
// the outputs go back the same way (the reverse all-to-all in backward too); the routing weights are
// applied where the tokens live, so their gradients stay local. Any count may be zero (a collapsed
// router): a rank that routes nothing to a peer, one that receives no rows at all (its experts run
// on zero rows and their gradients are zeros), an expert no rank routes to — every rank still takes
// part in both exchanges, so the collectives stay matched (sparse_mlp_ep_test.cc).
//
// Tensor parallelism (1D): the router and the shared expert's gate are replicated; each expert's (and
// the shared expert's) gate/up projections are split by rows and its down projection by columns over
// tp, like a dense MLP; the routing weights enter the partial sums through CopyToTp (their gradient
// summed over tp) and one ReduceFromTp completes the block. Grid layouts use the same over the grid's
// hidden axis (the caller gathers the input along it), and the partial sums are reduce-scattered
// along the hidden dimension instead (TpCombine::kReduceScatter).
//
// The balancing loss (transformers' load_balancing_loss_func) is joint over every sparse block of one
// forward pass, so the blocks only record their router's statistics in a RouterStats, and each
// block's output carries the loss's gradient for its router probabilities into backward (Megatron's
// MoEAuxLossAutoScaler idea): d aux / d Σ_rows p_e = E·count_e / rows², with count and rows of the
// whole forward pass, known by the time backward reaches the block.
#ifndef TESSERA_PARALLEL_LAYERS_SPARSE_MLP_H_
#define TESSERA_PARALLEL_LAYERS_SPARSE_MLP_H_

#include <cstdint>
#include <map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include "absl/status/status.h"

#include "parallel/comm/communicator.h"

namespace tessera::parallel {

// What the routers of one forward pass (one micro-batch through the sparse blocks of this rank) saw.
// Shared with autograd (it outlives the forward in the graph), hence intrusive.
struct RouterStats : torch::CustomClassHolder {
  explicit RouterStats(int experts) : experts(experts) {}

  int experts;
  at::Tensor counts;     // [E] fp64: tokens routed to each expert (each top-k slot counts), over the blocks.
  at::Tensor prob_sums;  // [E] fp64, no gradient: Σ over tokens and blocks of the router probabilities.
  int64_t rows = 0;      // Router rows: tokens × sparse blocks.
  // Which rows of each sparse block's input [B·T] (this rank's) the statistics count, 1 or 0 in the
  // block's device and fp64 (transformers' attention mask in load_balancing_loss_func: a preference
  // pair's padding is left out); undefined: every row. The balancing loss's gradient reaches the
  // counted rows only. Set by the pipeline before the forward (PipelineOptions::counted).
  at::Tensor counted;
  // Per sparse block (its index): [E] fp64 tokens routed to each expert (with a router bias, by the
  // biased choice; `counts` is always transformers' choice, the plain top-k of the probabilities).
  std::map<int, at::Tensor> layer_counts;
  // d objective / d aux, set before backward (coefficient × loss scale / accumulation); 0: the loss
  // is reported but not trained.
  double grad_scale = 0;
  // Router jitter's noise (SparseMlpOptions::jitter): drawn from a generator seeded by (noise_seed,
  // block) over the micro-batch's whole sequence, of which this rank holds block sequence_block of
  // sequence_blocks (sequence parallelism) — the same noise in every layout and in recomputation.
  uint64_t noise_seed = 0;
  int sequence_block = 0;
  int sequence_blocks = 1;
  // Grid tensor parallelism: this rank holds chunk sample_block of sample_blocks of the micro-batch's
  // samples (Decoder::SampleChunk()); the noise is drawn for all of them.
  int sample_block = 0;
  int sample_blocks = 1;

  // transformers' aux_loss: E · Σ_e (counts_e / rows) · (prob_sums_e / rows); 0 with no rows.
  double AuxLoss() const;
  // Sequence parallelism: counts, probability sums and rows become their sums over `sp` (the
  // micro-batch's whole sequence); a collective over it. Every member must hold the same blocks.
  absl::Status SumOver(Communicator& sp, c10::Device device);
};

// LoRA adapters of one expert's (or the shared expert's) linears, undefined where the linear has
// none: the linear's output gains lora_scale · (x·Aᵀ)·Bᵀ. tp parts as the caller passes them:
// gate/up (column-parallel) A whole with its gradient summed over tp (CopyToTp), B this rank's rows;
// down (row-parallel) A this rank's columns, B whole with its gradient summed over tp — the block's
// final reduction over tp completes B·A·x like the down projection's own partial sums.
struct ExpertLora {
  at::Tensor gate_a, gate_b, up_a, up_b, down_a, down_b;
};

struct SparseMlpWeights {
  at::Tensor router;                       // [E, h], replicated over tp.
  // Per expert held (all, or this ep rank's E/ep), this rank's parts: [f/tp, h], [f/tp, h], [h, f/tp].
  std::vector<at::Tensor> gate, up, down;
  // The shared expert (undefined without one): its SwiGLU parts like an expert's, and its gate [1, h].
  at::Tensor shared_gate_proj, shared_up, shared_down, shared_gate;
  // LoRA: per expert held (as gate/up/down), and the shared expert's; empty: no adapters on experts.
  std::vector<ExpertLora> lora;
  ExpertLora shared_lora;
  double lora_scale = 0;
  // Loss-free balancing (undefined: none): [E] fp32 added to the probabilities to choose the top-k
  // experts; their weights stay the probabilities (then renormalised when norm_topk_prob).
  at::Tensor router_bias;
};

// How a rank's experts compute their rows (the same numbers either way, up to the GEMMs' rounding).
enum class ExpertGemm {
  kLoop,     // One GEMM chain per expert (every device, dtype, LoRA and FP8).
  kGrouped,  // Three at::_grouped_mm per block over the experts' weights stacked [E, ·, ·] (a copy of
             // them per pass; an empty expert's weights are masked so its gradient is zeros on every
             // GPU). Taken only without LoRA on the experts, without FP8, and with the hidden and
             // (tp-local) intermediate sizes multiples of 8 (16-byte strides); otherwise kLoop.
};

// kGrouped for bf16 on CUDA (a grouped GEMM kernel instead of E launches each), kLoop otherwise.
ExpertGemm DefaultExpertGemm(const at::Tensor& x);

// How the tp group's partial outputs are completed.
enum class TpCombine {
  kAllReduce,      // Every member gets the whole output [B, T, h] (1D tp).
  kReduceScatter,  // Member r gets hidden chunk r of it, [B, T, h/tp] (grid layouts' hidden axis).
};

struct SparseMlpOptions {
  int experts_per_token = 2;
  bool norm_topk_prob = true;
  // > 0: each expert takes at most ceil(capacity_factor · N · k / E) of this rank's N·k assignments,
  // the first in token order (slot order within a token); the others are dropped — they add nothing
  // to their token's output and the kept weights are not renormalised. The routers' statistics (the
  // balancing loss) count every assignment, dropped or not. 0: dropless.
  double capacity_factor = 0;
  // > 0 (training, i.e. with statistics): the block's input x is multiplied by noise uniform in
  // [1 − jitter, 1 + jitter] before routing, as transformers' Mixtral router_jitter_noise (the router
  // and the experts see the jittered x); the noise comes from JitterNoise.
  double jitter = 0;
  TpCombine combine = TpCombine::kAllReduce;
  ExpertGemm gemm = ExpertGemm::kLoop;
};

// Router jitter's noise for block `layer` of the forward pass whose statistics are `stats`, shaped
// like x [B, T, h] (this rank's samples and sequence block): CPU generator seeded by
// (stats.noise_seed, layer), uniform [1 − jitter, 1 + jitter) over
// [B·sample_blocks, T·sequence_blocks, h] in fp32, this rank's block of it.
at::Tensor JitterNoise(const RouterStats& stats, int layer, double jitter, at::IntArrayRef x_shape);

// x [B, T, h], the same on every tp rank → the block's output [B, T, h], the same on every tp rank
// (with options.combine kReduceScatter: rank r's hidden chunk r, [B, T, h/tp]).
// With `stats` (training): adds this block's counts, probabilities and rows to it when `record` (not in
// activation checkpointing's recomputation, which repeats a recorded forward), and carries the
// balancing loss's gradient into backward. `layer` keys stats->layer_counts.
// `ep`: null or a group of one (every expert here), or the expert-parallel group (w holds expert
// ep->rank()·E/ep onwards).
at::Tensor SparseMlp(const at::Tensor& x, const SparseMlpWeights& w, const SparseMlpOptions& options,
                     Communicator* tp, Communicator* ep, RouterStats* stats, bool record, int layer);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_LAYERS_SPARSE_MLP_H_
