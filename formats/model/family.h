// A model family as data: the architecture choices of its blocks and the names of its parameters.
// The decoder (decoder.h) is one implementation driven by this spec, so a further family that differs
// only in these choices (Qwen2: qkv biases; Mistral: Llama's shape) is a new entry here, not a copy
// of the model. Names are transformers' own without the model prefix ("transformer." for GPT-2,
// "model." for Llama), so checkpoints map to Hugging Face by a prefix (docs/models.md).
#ifndef TESSERA_FORMATS_MODEL_FAMILY_H_
#define TESSERA_FORMATS_MODEL_FAMILY_H_

#include <string>
#include <vector>

#include "formats/model/model_config.h"
#include "formats/model/tp_split.h"

namespace tessera::formats::model {

enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kSwiGlu };          // GELU(erf) of one matrix; SiLU(gate)·up.
enum class PositionKind { kLearned, kRotary };  // Added position embedding; rotary q and k (rotate-half).

struct FamilySpec {
  NormKind norm;
  MlpKind mlp;
  PositionKind positions;
  bool biases;         // Every linear and norm has a bias.
  bool fused_qkv;      // One [3·hidden, hidden] projection (q, k, v stacked) instead of three.
  bool residual_init;  // Output projections drawn with std 0.02/sqrt(2·layers) (GPT-2), else 0.02.
  // transformers: the prefix of the non-head parameters' names ("transformer.", "model."), and whether
  // its linear weights are stored [in, out] (GPT-2's Conv1D) rather than torch's [out, in].
  std::string hf_prefix;
  bool hf_conv1d;
  // Parameter names (".weight" / ".bias" appended). Block parameters are block_prefix + i + "." + name.
  std::string token_embedding, position_embedding, final_norm, lm_head;
  std::string block_prefix, attn_norm, qkv, q, k, v, attn_out, mlp_norm, mlp_in, gate, up, mlp_out;
  // Per-head RMSNorms of queries and keys (ModelConfig::qk_norm), and a sparse block's parameters:
  // its router (moe + "." + router), expert e's SwiGLU (moe + "." + experts + ".e." + expert_gate, ...),
  // the shared expert (moe + "." + shared_expert + "." + gate / up / mlp_out roles without "mlp.") and
  // its gate. Empty where the family has no such part.
  std::string q_norm, k_norm, moe, router, experts, expert_gate, expert_up, expert_down, shared_expert,
      shared_expert_gate;
};

const FamilySpec& FamilyOf(ModelFamily family);
// The spec's name of the family: "gpt", "llama", "mixtral".
const char* FamilyName(ModelFamily family);

// The documented name of a block parameter: "h.3.attn.c_attn.weight".
std::string BlockParamName(const FamilySpec& f, int layer, const std::string& role, const char* kind = "weight");
// A sparse block's parameters: its router "layers.3.mlp.gate.weight"; expert e's `role` (expert_gate,
// expert_up, expert_down) "layers.3.mlp.experts.5.gate_proj.weight"; the shared expert's `role`
// ("gate_proj", "up_proj", "down_proj") "layers.3.mlp.shared_expert.gate_proj.weight" and its gate.
std::string RouterName(const FamilySpec& f, int layer);
std::string ExpertParamName(const FamilySpec& f, int layer, int expert, const std::string& role);
std::string SharedExpertParamName(const FamilySpec& f, int layer, const std::string& role);
std::string SharedExpertGateName(const FamilySpec& f, int layer);

// The parts of the model one rank holds (pipeline stages hold a subset; parallel/pipeline).
struct ModelPart {
  std::vector<int> layers;  // Blocks held, ascending (global block indices).
  bool embedding = true;    // The token (and position) embedding, used before the first block.
  bool head = true;         // The final norm and the LM head (the token embedding when tied).
  // Expert parallelism: the experts of every sparse block held, [expert_first, expert_first +
  // expert_count); expert_count -1: all of them.
  int expert_first = 0;
  int expert_count = -1;
  static ModelPart Whole(int layers);
};

// How one parameter is made: documented name, full shape, tp split, and its initialisation (normal
// with init_std when > 0, else the constant fill). `layer`: its block, -1 outside the blocks.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  TpSplit split = TpSplit::kReplicated;
  double init_std = 0;
  double fill = 0;
  GridSplit grid;  // With split kGrid.
  int layer = -1;
  int expert = -1;  // A sparse block's expert this belongs to; -1 for every other parameter.
  bool lora = false;        // Trained under LoRA (LoraParamSpecs: an adapter, or a reward model's score head).
  double uniform_bound = 0;  // > 0: initialised uniform in [−bound, bound) instead.
};

// The parameters of `part` of a model of `config` for 1D tensor parallelism over `tp` ranks, in the
// model's order (GPT-2's order is the one its checkpoints have always had). Key/value projections
// are split over tp when kv_heads >= tp and replicated otherwise.
std::vector<ParamSpec> ParamSpecs1D(const ModelConfig& config, const ModelPart& part, int tp);

// LoRA (config.lora enabled): for each weight of `base` (a block's linear, [out, in]) whose role's
// module name is a target, its adapters ROLE.lora_A.weight [r, in] and ROLE.lora_B.weight [out, r]
// (PEFT's names under the base name's prefix), split over tp consistently with the linear: a
// column-parallel one (split by rows) keeps A whole and splits B by rows, a row-parallel one (split
// by columns) splits A by columns and keeps B whole, a replicated one keeps both whole. A is drawn as
// PEFT draws it (kaiming-uniform, a = √5: uniform ±1/√in), B is zero. A sparse block's experts and
// shared expert take adapters as peft wraps them (by module name: gate_proj/up_proj/down_proj, or
// Mixtral's w1/w3/w2), an expert's belonging to it (ParamSpec::expert). Then, when `base` holds a
// reward model's score head (ModelConfig::score_head), that head itself, trained whole beside the
// adapters as PEFT trains the modules_to_save of a SEQ_CLS task (its spec as in `base`, drawn alike).
// {} without LoRA. Every other parameter of `base` is frozen.
std::vector<ParamSpec> LoraParamSpecs(const ModelConfig& config, const std::vector<ParamSpec>& base);
// The module name of a block parameter's role ("q_proj" of "layers.3.self_attn.q_proj.weight").
std::string ModuleOf(const std::string& param_name);

// The name of the token embedding where the LM head uses it too (its gradient then sums the two
// uses, across pipeline stages when they are apart), "" for an untied head and for a score head.
std::string TiedEmbeddingName(const ModelConfig& config);

// A reward model's head (ModelConfig::score_head): transformers' *ForSequenceClassification name,
// outside the family's prefix, [1, hidden], replicated over tp, drawn normal(0, 0.02) like any weight.
inline constexpr char kScoreWeight[] = "score.weight";
// A parameter's transformers name: the family's prefix + name, but the LM head's and the score head's
// stand outside it ("lm_head.weight", "score.weight").
std::string HfParamName(const FamilySpec& family, const std::string& name);

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_FAMILY_H_
