// GPT-2, exactly (pre-LN blocks, learned positions, GELU(erf) MLP of 4×hidden, causal attention,
// LayerNorm eps 1e-5, final LayerNorm, LM head tied to the token embedding, no dropout), with 1D
// tensor parallelism over `tp`: column-parallel c_attn / c_fc, row-parallel c_proj, heads split over
// tp ranks, vocab-parallel embedding and cross-entropy. Names and layouts: docs/checkpoint-format.md.
#ifndef TESSERA_PARALLEL_MODELS_GPT_H_
#define TESSERA_PARALLEL_MODELS_GPT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "absl/status/status.h"
#include "parallel/comm/communicator.h"
#include "parallel/models/gpt_config.h"
#include "parallel/layers/tp2d_ops.h"
#include "parallel/models/param_layout.h"
#include "parallel/sequence/sequence_attention.h"

namespace tessera::parallel {

// Called by the model around the use of each parameter unit (ZeRO-3 gathers units just before use
// and frees them after; see Gpt::Units()). Unit 0 holds the embeddings and the final norm (used at
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

// How the tp group splits the model.
//   1D    Megatron: heads and MLP columns split, activations replicated.
//   2D    a q×q grid (tp = q², axes i, j): activations split by samples over i and by hidden over j,
//         linear weights in SUMMA blocks (i, j), norms, biases and embeddings split by hidden over j.
//   2.5D  Tesseract: d layers of the 2D grid (tp = d·q², axes k, i, j): samples split over (k, i),
//         every layer holds the same 2D blocks (their gradients summed over k).
//   3D    a q×q×q cube (axes x, y, z): between blocks, samples split over (x, y) and hidden over z;
//         each linear gathers its input over one axis and its weight over x and reduce-scatters its
//         output over the third, so input and output layouts alternate (parallel/layers/tp3d_ops.h).
// Grid layouts: embeddings split by hidden, the tied head's logits reduce-scattered by vocabulary
// into the vocab-parallel loss.
enum class TpLayout { k1D, k2D, k2p5D, k3D };

struct TpShape {
  TpLayout layout = TpLayout::k1D;
  int q = 1;      // Grid side.
  int depth = 1;  // 2.5D: the number of layers d.
  // The grid's axis sizes, major first (ProcessGroups::tp_axes): {q, q}, {d, q, q}, {q, q, q}; {} for 1D.
  std::vector<int> Grid() const;
};

// The shape of `tp` ranks in `mode` ("1d", "2d", "2.5d" with `depth` layers, "3d"); the grid's
// side is the largest that fits, so a tp that does not form the grid gives a shape whose Grid()
// product differs from tp. Unknown modes give 1D.
TpShape TpShapeOf(const std::string& mode, int tp, int depth = 1);

// The parts of the model one rank holds (pipeline stages hold a subset; parallel/pipeline).
struct GptPart {
  std::vector<int> layers;  // Blocks held, ascending (global block indices).
  bool embedding = true;    // wte and wpe, used before the first block.
  bool head = true;         // ln_f and the head (tied to wte), used after the last block.
  static GptPart Whole(int layers);
};

// How one parameter is made: documented name, full shape, tp split, and its initialisation (normal
// with init_std when > 0, else the constant fill).
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  TpSplit split = TpSplit::kReplicated;
  double init_std = 0;
  double fill = 0;
  GridSplit grid;  // With split kGrid.
};

// The parameters of `part` of a GPT of `config`, in the model's order, split for `layout`.
std::vector<ParamSpec> GptParamSpecs(const GptConfig& config, const GptPart& part, const TpShape& tp = {});

class Gpt {
 public:
  // Parameters initialised as GPT-2 does (normal(0, 0.02) weights, zero biases, unit norm weights,
  // residual projections normal(0, 0.02/sqrt(2·layers))). Each full tensor is drawn from its own
  // generator seeded by (seed, name), then split, so every layout starts from identical weights.
  // Requires heads % tp == 0 and vocab % tp == 0. Parameters live on `device` (drawn on the CPU
  // first, so every device starts from the same values).
  // Only the parameters of `part` are created (drawn the same way, so every layout agrees); wte exists
  // where the embedding or the head is held (a pipeline's first and last stage both hold it).
  Gpt(const GptConfig& config, std::shared_ptr<Communicator> tp, uint64_t seed, c10::Device device);
  Gpt(const GptConfig& config, const GptPart& part, std::shared_ptr<Communicator> tp, uint64_t seed,
      c10::Device device);
  // Grid layouts (2D, 2.5D, 3D): `axes` are this rank's groups along the grid's axes
  // (ProcessGroups::tp_axes). Token batches given to Embed/Head/Loss are this rank's chunk of the
  // micro-batch's samples (SampleChunk()).
  Gpt(const GptConfig& config, const GptPart& part, std::shared_ptr<Communicator> tp, const TpShape& shape,
      std::vector<std::shared_ptr<Communicator>> axes, uint64_t seed, c10::Device device);
  // Which chunk of each micro-batch's samples this rank processes: (index, count); (0, 1) for 1D.
  std::pair<int, int> SampleChunk() const;

  // Mean cross-entropy over all tokens of `tokens` [B, T] predicting `targets` [B, T] (T <= seq_len).
  // Needs the whole model: Head(Blocks(Embed(tokens), 0, layers), targets).
  at::Tensor Loss(const at::Tensor& tokens, const at::Tensor& targets);

  // The pieces of Loss, for pipeline stages: token + position embedding [B, T, hidden] (needs the
  // embedding); blocks [first, first + count) (must be held); final norm, tied head and mean
  // cross-entropy (needs the head).
  at::Tensor Embed(const at::Tensor& tokens);
  // The shape of this rank's activations between blocks for `samples` × `positions` tokens given to it.
  std::vector<int64_t> ActivationShape(int64_t samples, int64_t positions) const;
  at::Tensor Blocks(at::Tensor x, int first, int count);
  at::Tensor Head(const at::Tensor& x, const at::Tensor& targets);

  // Transformer block `i` on activations `x` [B, T, hidden] (used by Loss and by recomputation).
  at::Tensor Block(const at::Tensor& x, int i);

  // Keep only each block's input in the forward pass and recompute the block in backward.
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  // Sequence parallelism: the tokens given to Embed/Loss are block sp->rank() of the sequence (all
  // ranks the same length), positions offset accordingly; attention spans the whole sequence through
  // `mode` (parallel/sequence). The loss is this block's mean: the mean over the sequence is the
  // average over sp ranks, and gradients are averaged over sp like over dp.
  void set_sequence_parallel(std::shared_ptr<Communicator> sp, SpMode mode) {
    sp_ = std::move(sp);
    sp_mode_ = mode;
  }
  // Use the fused CUDA kernels (layer norm, bias+GELU) where they apply (kernels/fused_ops.h).
  void set_fused_kernels(bool on) { fused_kernels_ = on; }

  // Indices into params() of each unit (see UnitHooks), in forward order; every parameter in one.
  // Unit 0 holds the non-block parameters (possibly none), unit 1 + j the j-th held block.
  std::vector<std::vector<size_t>> Units() const;
  // The unit of held block `layer` (1 + its position in part().layers), -1 if not held.
  int UnitOfLayer(int layer) const;
  // Hooks around each unit's use (null: none). Not owned; must outlive the model's use.
  void set_unit_hooks(UnitHooks* hooks) { hooks_ = hooks; }
  UnitHooks* unit_hooks() const { return hooks_; }

  std::vector<Param>& params() { return params_; }
  const GptConfig& config() const { return config_; }
  const GptPart& part() const { return part_; }
  bool holds(const std::string& name) const { return index_.count(name) > 0; }
  Communicator* tp() const { return tp_.get(); }
  int64_t num_parameters() const;  // Of the full model.

  // Replaces this rank's parts with the shards of `full` tensors (every documented name required,
  // shapes checked). Fails naming the first missing or mis-shaped tensor.
  absl::Status LoadFull(const std::map<std::string, at::Tensor>& full);

 private:
  Param& Add(const ParamSpec& spec, uint64_t seed);
  const at::Tensor& P(const std::string& name) const;
  // Grid layouts: the parameter as used, copied over every grid axis it is not split by (its
  // gradients summed over them in backward).
  at::Tensor Use(const std::string& name) const;
  at::Tensor GridBlock(const at::Tensor& x, int i);
  // Causal self-attention of this rank's heads from qkv [B, T, 3·heads·head_dim] (q, k, v blocks),
  // over the whole sequence when it is split over sp; returns [B, T, heads·head_dim].
  at::Tensor Attention(const at::Tensor& qkv, int64_t local_heads, int64_t head_dim);
  // x [B, T, in part] → [B, T, out part] in the output layout, bias added. `second`: 3D's second
  // linear of a pair (input split over (x, z) and hidden over y).
  at::Tensor GridLinear(const at::Tensor& x, const std::string& weight, const std::string& bias, bool second);
  at::Tensor CheckpointedBlock(const at::Tensor& x, int i);

  GptConfig config_;
  GptPart part_;
  std::shared_ptr<Communicator> tp_;
  std::shared_ptr<Communicator> sp_;  // Null or one rank: no sequence parallelism.
  TpShape shape_;
  std::vector<std::shared_ptr<Communicator>> axes_;  // Grid layouts: groups along each axis.
  Grid2D grid_;  // 2D / 2.5D: the (i, j) grid of this rank's layer; 3D: row = z (hidden between blocks).
  SpMode sp_mode_ = SpMode::kRing;
  c10::Device device_;
  std::vector<Param> params_;
  std::map<std::string, size_t> index_;
  bool activation_checkpointing_ = false;
  bool fused_kernels_ = false;
  UnitHooks* hooks_ = nullptr;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_GPT_H_
