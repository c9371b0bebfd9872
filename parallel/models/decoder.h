// A decoder-only transformer of one family (family.h): pre-norm blocks of causal self-attention and
// an MLP, a final norm and an LM head; no dropout. GPT-2 exactly (LayerNorm, learned positions,
// GELU(erf) MLP, tied head) and the Llama shape (RMSNorm, rotary positions in transformers'
// rotate-half convention, SwiGLU, grouped-query attention, untied head unless tied). 1D tensor
// parallelism over `tp`: column-parallel input projections, row-parallel output projections, heads
// (and key/value heads when kv_heads >= tp; else each rank uses the one it needs of all of them)
// split over tp ranks, vocab-parallel embedding and cross-entropy. Grid layouts: every family. Names and
// layouts: docs/checkpoint-format.md, docs/models.md.
#ifndef TESSERA_PARALLEL_MODELS_DECODER_H_
#define TESSERA_PARALLEL_MODELS_DECODER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "absl/status/status.h"
#include "formats/model/family.h"
#include "parallel/models/model_config.h"
#include "layout/tp_grid.h"
#include "parallel/comm/communicator.h"
#include "parallel/layers/fp8_linear.h"
#include "parallel/layers/sparse_mlp.h"
#include "parallel/objectives/objective.h"
#include "parallel/layers/tp2d_ops.h"
#include "parallel/models/param_layout.h"
#include "parallel/sequence/sequence_attention.h"

namespace tessera::parallel {

// Called by the model around the use of each parameter unit (ZeRO-3 gathers units just before use
// and frees them after; see Decoder::Units()). Unit 0 holds the embeddings and the final norm (used at
// both ends of the forward pass), unit 1 + i the parameters of block i.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Before the unit's parameters are read in a forward pass, or (`recomputation`) in the forward
  // that activation checkpointing repeats inside backward.
  virtual void PreForward(int unit, bool recomputation) = 0;
  // After the unit's forward produced `output` (returned, possibly with a gradient hook attached).
  virtual at::Tensor PostForward(int unit, at::Tensor output) = 0;
};

// How the tp group splits the model: layout::TpMode (layout/modes.h) and its grid (layout/tp_grid.h).
// Grid layouts: embeddings split by hidden, the tied head's logits reduce-scattered by vocabulary
// into the vocab-parallel loss.
using layout::TpGrid;
using layout::TpMode;

// The parameters of `part` of a model of `config` split over `tp` ranks in `layout`.
std::vector<formats::model::ParamSpec> ModelParamSpecs(const ModelConfig& config, const formats::model::ModelPart& part, int tp,
                                       const TpGrid& grid = {});
// The parameters a Decoder of `config` trains (its params(), in their order): all of
// ModelParamSpecs, or with LoRA only the adapters (LoraParamSpecs).
std::vector<formats::model::ParamSpec> TrainedParamSpecs(const ModelConfig& config, const formats::model::ModelPart& part, int tp,
                                         const TpGrid& grid = {});

// Keys and values of the positions already seen, per block, for incremental decoding (generate.h).
struct KvCache {
  int64_t length = 0;  // Positions cached: the next token's position.
  // Per block: [B, kv heads (this rank's), slots, head_dim] — slots = length, or `capacity` when set
  // (of which the first `length` are filled). Grouped-query attention reads each key/value head for
  // its query heads without repeating it.
  std::vector<at::Tensor> k, v;
  // > 0: the slots are allocated once, at the first step, and each step writes its keys and values
  // into the next ones (no copy of the cache per step); a step past it is an error. 0: the cache
  // grows by concatenation.
  int64_t capacity = 0;
  // Left-padded rows (prompts of different lengths decoded as one batch): [B] int64 on the CPU, row b's
  // leading padding slots — its tokens sit at slots offsets[b] … and its positions count from there;
  // no query attends to a padding slot but the padding's own (kept finite). Undefined: no padding.
  at::Tensor offsets;

  // Keeps rows `rows` ([B'] int64, on the CPU; repeats allowed) of every block and of offsets, in that
  // order (the sampler's completions of one prompt, finished rows leaving the batch).
  void SelectRows(const at::Tensor& rows);
};

class Decoder {
 public:
  // Parameters initialised as the family's reference does (normal(0, 0.02) weights, zero biases,
  // unit norm weights; GPT-2's output projections normal(0, 0.02/sqrt(2·layers))). Each full tensor
  // is drawn from its own generator seeded by (seed, name), then split, so every layout starts from
  // identical weights. Requires heads % tp == 0, vocab % tp == 0, and kv_heads % tp == 0 or
  // tp % kv_heads == 0 (the trainer and the spec's validation say so first). Parameters live on
  // `device` (drawn on the CPU first, so every device starts from the same values).
  // Only the parameters of `part` are created (drawn the same way, so every layout agrees); a tied
  // token embedding exists where the embedding or the head is held (a pipeline's first and last
  // stage both hold it).
  Decoder(const ModelConfig& config, std::shared_ptr<Communicator> tp, uint64_t seed, c10::Device device);
  Decoder(const ModelConfig& config, const formats::model::ModelPart& part, std::shared_ptr<Communicator> tp, uint64_t seed,
          c10::Device device);
  // Grid layouts (2D, 2.5D, 3D): `axes` are this rank's groups along the grid's axes
  // (ProcessGroups::tp_axes). Token batches given to Embed/Head/Loss are this rank's chunk of the
  // micro-batch's samples (SampleChunk()).
  Decoder(const ModelConfig& config, const formats::model::ModelPart& part, std::shared_ptr<Communicator> tp, const TpGrid& grid,
          std::vector<std::shared_ptr<Communicator>> axes, uint64_t seed, c10::Device device);
  // Which chunk of each micro-batch's samples this rank processes: (index, count); (0, 1) for 1D.
  std::pair<int, int> SampleChunk() const;
  // Grid layouts: the groups along the axes that split the samples (every axis but the hidden one);
  // a statistic of this rank's samples summed over all of them covers the micro-batch. {} for 1D.
  std::vector<Communicator*> SampleAxes() const;

  // Mean cross-entropy over all tokens of `tokens` [B, T] predicting `targets` [B, T] (T <= seq_len).
  // Needs the whole model: Head(Blocks(Embed(tokens), 0, layers), targets).
  // Masked targets (set_masked_targets, SFT data: formats/data/token_dataset.h): an id −k−1 stands for
  // token k, in `tokens` as in `targets`; such a target is not trained on, and each other target's
  // cross-entropy counts target_weight times in the mean (the trainer sets it so that the step's loss
  // is the sum over the global batch's trained targets divided by their number).
  at::Tensor Loss(const at::Tensor& tokens, const at::Tensor& targets);
  void set_masked_targets(bool masked) { masked_targets_ = masked; }
  void set_target_weight(double weight) { target_weight_ = weight; }
  // What Head (and so Loss) computes from each target's cross-entropy (parallel/objectives): the
  // mean cross-entropy unless set. Not null.
  void set_objective(std::shared_ptr<const Objective> objective) { objective_ = std::move(objective); }
  const Objective& objective() const { return *objective_; }
  // What the objective reads per sample of the micro-batch the next Head computes the loss of
  // (TargetLosses::sample_data: DPO's reference log-probabilities), this rank's samples in order;
  // undefined (the default): nothing.
  void set_sample_data(at::Tensor data) { sample_data_ = std::move(data); }
  // The LM head's logits are divided by `temperature` (> 0) before the log-softmax (GRPO's policy
  // log-probabilities at the sampling temperature: transformers' logits / temperature), applied as the
  // final hidden state scaled by 1 / temperature (the head has no bias). 1: the logits as they are.
  void set_logit_temperature(double temperature) { logit_scale_ = 1.0 / temperature; }
  // Packed sequences (formats/data/token_dataset.h "Packing") and shared-prompt rows (DPO's): the
  // positions [B, T] of the tokens the next forward passes (and the recomputations of their backward)
  // take — of the whole sequence, all sp blocks — for the rotary or learned position embeddings; a
  // token attends only to the earlier tokens it descends from (PositionSpanEnds: a packed run's own
  // tokens; a shared prompt and its own completion). Undefined (the default): positions 0 .. T−1,
  // causal attention. Not with a KV cache.
  void set_positions(at::Tensor positions);
  // LoRA dropout (config.lora.dropout > 0): the micro-batch's seed of the masks of the forward passes
  // that follow and of the recomputations in their backward (LoraDropout) — the same for every rank
  // holding part of the micro-batch. Unset (the default; evaluation, decoding): no dropout.
  void set_dropout_seed(std::optional<uint64_t> seed) { dropout_seed_ = seed; }
  // LoRA: whether the adapters take part in the forward passes that follow (default true); false is
  // the base model's forward (peft's disable_adapter(): DPO's reference under LoRA).
  void set_adapters_enabled(bool enabled) { adapters_enabled_ = enabled; }

  // The pieces of Loss, for pipeline stages: token + position embedding [B, T, hidden] (needs the
  // embedding); blocks [first, first + count) (must be held); final norm, tied head, each target's
  // cross-entropy and the objective over them (needs the head). A reward model's head
  // (config.score_head) instead scores the positions whose targets are trained (one per sample:
  // the Trainer's reward rows) and gives the objective those scores.
  at::Tensor Embed(const at::Tensor& tokens);
  // The shape of this rank's activations between blocks for `samples` × `positions` tokens given to it.
  std::vector<int64_t> ActivationShape(int64_t samples, int64_t positions) const;
  at::Tensor Blocks(at::Tensor x, int first, int count);
  at::Tensor Head(const at::Tensor& x, const at::Tensor& targets);

  // Incremental decoding (the whole model on each rank of a 1D tp group: no pp, sp, grid or ep):
  // logits [B, T, vocab] of `tokens` [B, T] at positions cache->length.. (each attends to the cached
  // positions and the earlier ones of `tokens`); appends their keys and values to `cache` (this rank's
  // heads). With tp > 1 every member calls it with the same tokens (a collective) and gets the same
  // logits (gathered over the vocabulary). No autograd.
  at::Tensor DecodeStep(const at::Tensor& tokens, KvCache* cache);

  // Transformer block `i` on activations `x` [B, T, hidden] (used by Loss and by recomputation).
  at::Tensor Block(const at::Tensor& x, int i);
  // The FP8 options for the linear layer of weight `weight` (a transformers name), or null: FP8 off or
  // the name matches a filter pattern.
  const Fp8Options* Fp8For(const std::string& weight) const;
  // Linear(x, w, b) under Fp8For(weight).
  at::Tensor BlockLinear(const at::Tensor& x, const std::string& weight, const at::Tensor& w,
                         const at::Tensor& b = at::Tensor());

  // The token embedding's name when the head uses it too ("" for an untied head): its gradient sums
  // both uses, also across pipeline stages.
  const std::string& tied_embedding() const { return tied_; }

  // Keep only each block's input in the forward pass and recompute the block in backward.
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  // Sequence parallelism: the tokens given to Embed/Loss are block sp->rank() of the sequence (all
  // ranks the same length), positions offset accordingly; attention spans the whole sequence through
  // `mode` (parallel/sequence). The loss is this block's mean: the mean over the sequence is the
  // average over sp ranks (the Trainer weighs each block's loss 1/sp and sums gradients over sp, as
  // over dp).
  void set_sequence_parallel(std::shared_ptr<Communicator> sp, SpMode mode) {
    sp_ = std::move(sp);
    sp_mode_ = mode;
  }
  // Mixture of Experts: the sparse blocks of the forward passes that follow record their routers'
  // statistics in `stats` and carry the balancing loss's gradient (sparse_mlp.h) — one RouterStats per
  // micro-batch, set before its forward pass. Null (evaluation, decoding): nothing recorded.
  void set_router_stats(c10::intrusive_ptr<RouterStats> stats) { router_stats_ = std::move(stats); }
  // Expert parallelism: the group the experts are split over (part().expert_first / expert_count are
  // this rank's: rank·E/ep .. (rank + 1)·E/ep); tokens go to their experts' ranks and back by all-to-all.
  // Null or one rank: every expert here.
  void set_expert_parallel(std::shared_ptr<Communicator> ep) { ep_ = std::move(ep); }
  // Loss-free balancing: [layers, E] fp32 on the model's device, row i block i's router bias (read at
  // every forward; the trainer updates it in place). Undefined: none.
  void set_router_bias(at::Tensor bias) { router_bias_ = std::move(bias); }
  const c10::intrusive_ptr<RouterStats>& router_stats() const { return router_stats_; }
  // Block `i` again inside backward (activation checkpointing) for the forward pass whose statistics
  // are `stats`: its sparse blocks carry their gradients without recording a second time; `loss_rows`
  // as that forward pass had them (see loss_rows()).
  at::Tensor Recompute(const at::Tensor& x, int i, c10::intrusive_ptr<RouterStats> stats, at::Tensor loss_rows);
  // SFT data inside Loss (masked targets, 1D tp, a dense last block, no LoRA dropout): the rows of the
  // flattened [B·T'] positions whose targets are trained, [N] int64 (N > 0) — the only rows whose last
  // block's MLP output and logits reach the loss, so the last block's MLP, the final norm and the head
  // run on them alone (the attention still on every position: it feeds them); the loss is the same
  // Σ over trained targets / (B·T). T' ≤ T: without sequence parallelism, packing or a Mixture of
  // Experts, Loss leaves out the positions after the batch's last trained target (right padding,
  // truncated answers), which reach no loss through causal attention. Undefined otherwise (pipelines,
  // evaluation of plain data, decoding).
  const at::Tensor& loss_rows() const { return loss_rows_; }

  // Use the fused CUDA kernels (layer norm, bias+GELU) where they apply (kernels/fused_ops.h).
  void set_fused_kernels(bool on) { fused_kernels_ = on; }
  // FP8 GEMMs (fp8_linear.h) for the transformer blocks' linear layers that Fp8Applies to and whose
  // weight names match no filter pattern; the embedding, the output head, the routers and LoRA's
  // adapters (below min_dim) stay in the parameters' dtype. 1D tensor parallelism only (grid layouts'
  // GEMMs are their own). nullopt: none.
  void set_fp8(std::optional<Fp8Options> options) { fp8_ = std::move(options); }
  // How the sparse blocks' experts compute (sparse_mlp.h ExpertGemm); nullopt (the default):
  // DefaultExpertGemm of the block's input.
  void set_expert_gemm(std::optional<ExpertGemm> gemm) { expert_gemm_ = gemm; }

  // Indices into params() of each unit (see UnitHooks), in forward order; every parameter in one.
  // Unit 0 holds the non-block parameters (possibly none), unit 1 + j the j-th held block.
  std::vector<std::vector<size_t>> Units() const;
  // The unit of held block `layer` (1 + its position in part().layers), -1 if not held.
  int UnitOfLayer(int layer) const;
  // Hooks around each unit's use (null: none). Not owned; must outlive the model's use.
  void set_unit_hooks(UnitHooks* hooks) { hooks_ = hooks; }
  UnitHooks* unit_hooks() const { return hooks_; }

  std::vector<Param>& params() { return params_; }
  const ModelConfig& config() const { return config_; }
  // Vocabulary rows each tp rank holds (1D): ceil(vocab / tp), the last ranks' padded (kPaddedDim0).
  int64_t VocabPart() const { return (config_.vocab + tp_->size() - 1) / tp_->size(); }
  const formats::model::ModelPart& part() const { return part_; }
  bool holds(const std::string& name) const { return index_.count(name) > 0; }
  Communicator* tp() const { return tp_.get(); }
  int64_t num_parameters() const;  // Of the full model.
  int64_t frozen_bytes() const;     // LoRA: this rank's frozen weights as held (0 without LoRA).

  // What LoadFull replaces: kModel, every tensor of the model (LoRA adapters and a reward model's
  // score head optional: missing ones keep their values); kTrainable, exactly the trained parameters (params(): a checkpoint's).
  enum class LoadWhat { kModel, kTrainable };
  // Replaces this rank's parts with the shards of `full` tensors (documented names, shapes checked).
  // Fails naming the first missing or mis-shaped tensor.
  absl::Status LoadFull(const std::map<std::string, at::Tensor>& full, LoadWhat what = LoadWhat::kModel);
  // LoRA: the frozen weights (every parameter but the adapters; not in params()) in `dtype` — the
  // trained ones get theirs from the optimizer.
  void CastFrozen(at::ScalarType dtype);

 private:
  Param& Add(const formats::model::ParamSpec& spec, uint64_t seed);
  void CheckConfig() const;
  const at::Tensor& P(const std::string& name) const;
  const Param& Named(const std::string& name) const;  // A trained or a frozen parameter.
  // LoRA: `y` (the output of linear `role` of block i on `in`, this rank's part) plus its adapter's
  // (alpha/r)·B·A·in when the role is a target. Column-parallel linears (`in` the same on every tp
  // rank): A whole, its gradient summed over tp; `rows` (start, count) narrows B's rows as the
  // caller narrowed the weight (a replicated key/value head). Row-parallel (`in` this rank's columns,
  // `y` already reduced): A·in summed over tp first.
  at::Tensor LoraColumn(const at::Tensor& y, const at::Tensor& in, int i, const std::string& role,
                        std::pair<int64_t, int64_t> rows = {0, -1}) const;
  at::Tensor LoraRow(const at::Tensor& y, const at::Tensor& in, int i, const std::string& role) const;
  // LoRA dropout of linear `role` of block i's input `in` ([B, T, C], this rank's tokens and, when
  // `columns_split`, its tp block of the input's columns): `in` itself without dropout or seed, else
  // `in` · mask / (1 − p), the mask drawn for the whole micro-batch (uniform < 1 − p over [B, T·sp,
  // C·tp] from a generator seeded with TensorSeed(dropout seed, the linear's weight name)) and cut to
  // this rank's part — the same masks in every layout, and again in recomputation.
  at::Tensor LoraDropout(const at::Tensor& in, int i, const std::string& role, bool columns_split) const;
  // LoRA on sparse block i: the adapters of experts [first, last) and of the shared expert into `w`
  // (left empty when none of them is targeted).
  void ExpertAdapters(int i, int first, int last, SparseMlpWeights* w) const;
  // Grid layouts: the parameter as used, copied over every grid axis it is not split by (its
  // gradients summed over them in backward).
  at::Tensor Use(const std::string& name) const;
  // Grid layouts: a parameter used whole by every rank of the hidden axis on the same samples (a
  // sparse block's router and shared-expert gate), copied over the sample axes only.
  at::Tensor UseAcrossSamples(const std::string& name) const;
  at::Tensor GridBlock(const at::Tensor& x, int i);
  // Causal self-attention of this rank's heads from qkv [B, T, 3·heads·head_dim] (q, k, v blocks),
  // over the whole sequence when it is split over sp; returns [B, T, heads·head_dim].
  at::Tensor Attention(const at::Tensor& qkv, int64_t local_heads, int64_t head_dim, int layer);
  // The same from q [B, H, T, D] and k, v [B, H, T, D] (heads already matched).
  // With a KV cache (DecodeStep), k and v are appended to block `layer`'s cache and q attends to all.
  at::Tensor Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int layer);
  // The family's norm of `x` with the parameters named base.weight (and base.bias).
  at::Tensor Norm(const at::Tensor& x, const std::string& base, bool fused);
  // RMSNorm of `x` over its last dimension scaled by `weight` (transformers' LlamaRMSNorm).
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight) const;
  // Sparse block `i`'s router and this rank's parts of its experts.
  SparseMlpWeights SparseWeights(int i) const;
  // Grid layouts: sparse block `i` on x (this rank's samples, hidden chunk) → its output in the same
  // layout: x gathered along the hidden axis, SparseMlp as 1D tp over that axis, reduce-scattered back.
  at::Tensor GridSparseMlp(const at::Tensor& x, int i);
  // 1D block with separate q, k, v projections (Llama's shape): attention of this rank's heads.
  at::Tensor SplitQkvAttention(const at::Tensor& x_tp, int i);
  // Attention of this rank's H query heads from q [B, T, H·D] and k, v [B, T, KV·D] (rotary when the
  // family has it, key/value heads repeated for grouped-query attention); returns [B, T, H·D].
  at::Tensor HeadsAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t H, int64_t kv,
                            int layer);
  // The family's norm over a hidden dimension split along the grid (grid layouts).
  at::Tensor GridNorm(const at::Tensor& x, const std::string& base);
  // q or k [B, H, T, D] rotated by their positions (first_position + t, or positions_ when set),
  // transformers' rotate-half.
  at::Tensor Rotary(const at::Tensor& t, int64_t first_position) const;
  // This rank's block of positions_ (its sp block); without sp the first T of them (T: the forward's
  // length, which Loss may have cut).
  at::Tensor LocalPositions(int64_t T) const;
  // The learned position embeddings (rows of `table`) of T tokens from first_position, or of
  // positions_ when set.
  at::Tensor LearnedPositions(const at::Tensor& table, int64_t first_position, int64_t T) const;
  // The first position of this rank's tokens in the sequence (sp splits the sequence in blocks;
  // decoding continues after the cached positions).
  // DecodeStep with KvCache::offsets: the positions [B, T] (CPU) of the T new tokens of each row.
  at::Tensor PaddedPositions(int64_t T) const;
  int64_t FirstPosition(int64_t tokens) const {
    if (cache_ != nullptr) return cache_->length;
    return sp_ ? sp_->rank() * tokens : 0;
  }
  // x [B, T, in part] → [B, T, out part] in the output layout, bias added. `second`: 3D's second
  // linear of a pair (input split over (x, z) and hidden over y).
  at::Tensor GridLinear(const at::Tensor& x, const std::string& weight, const std::string& bias, bool second);
  at::Tensor CheckpointedBlock(const at::Tensor& x, int i);
  // Head of a reward model (config_.score_head): the final norm and the score head at the scored
  // positions, and the objective over the scores (TargetLosses::scores).
  at::Tensor ScoreHead(const at::Tensor& x, const at::Tensor& targets);
  // TargetLosses::sum_over_sample_split: over the sequence blocks (sp), null without them.
  std::function<at::Tensor(const at::Tensor&)> SampleSplitSum() const;
  // Token ids with the masked-target encoding removed: −k−1 is token k.
  static at::Tensor RealIds(const at::Tensor& ids);

  ModelConfig config_;
  const formats::model::FamilySpec& family_;
  std::string tied_;
  formats::model::ModelPart part_;
  std::shared_ptr<Communicator> tp_;
  std::shared_ptr<Communicator> sp_;  // Null or one rank: no sequence parallelism.
  TpGrid shape_;
  std::vector<std::shared_ptr<Communicator>> axes_;  // Grid layouts: groups along each axis.
  Grid2D grid_;  // 2D / 2.5D: the (i, j) grid of this rank's layer; 3D: row = z (hidden between blocks).
  SpMode sp_mode_ = SpMode::kRing;
  c10::Device device_;
  std::vector<Param> params_;  // Trained (with LoRA: the adapters only).
  std::map<std::string, size_t> index_;
  std::vector<Param> frozen_;  // LoRA: the base weights, outside the optimizer.
  std::map<std::string, size_t> frozen_index_;
  std::vector<int> layer_of_;  // Per parameter: its block, -1 outside the blocks.
  bool activation_checkpointing_ = false;
  bool masked_targets_ = false;
  std::optional<uint64_t> dropout_seed_;  // set_dropout_seed.
  bool adapters_enabled_ = true;  // set_adapters_enabled.
  at::Tensor positions_;  // set_positions.
  at::Tensor ends_;       // With positions_: PositionSpanEnds, [B, T] (every layer's mask).
  double target_weight_ = 1;
  at::Tensor sample_data_;  // set_sample_data.
  double logit_scale_ = 1;  // set_logit_temperature: 1 / temperature.
  std::shared_ptr<const Objective> objective_ = DefaultObjective();
  bool fused_kernels_ = false;
  std::optional<Fp8Options> fp8_;  // set_fp8.
  std::optional<ExpertGemm> expert_gemm_;  // set_expert_gemm.
  UnitHooks* hooks_ = nullptr;
  KvCache* cache_ = nullptr;  // Set during DecodeStep only.
  c10::intrusive_ptr<RouterStats> router_stats_;
  std::shared_ptr<Communicator> ep_;
  at::Tensor router_bias_;
  bool recomputing_ = false;  // Inside Recompute: sparse blocks do not record again.
  at::Tensor loss_rows_;      // loss_rows().
  int64_t loss_positions_ = 0;  // With loss_rows_: B·T of the forward pass they select from.
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_DECODER_H_
