// Trainer: one rank's training loop — data, forward/backward with gradient accumulation, data-parallel
// gradient sums overlapped with backward, global-norm clipping, AdamW, checkpoints, step log.
//
// Every rank of the job constructs one with the same options and its own ProcessGroups, and calls
// Run(); collectives inside require all ranks to make the same calls in the same order.
#ifndef TESSERA_PARALLEL_TRAIN_TRAINER_H_
#define TESSERA_PARALLEL_TRAIN_TRAINER_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "formats/checkpoint/attempt_fence.h"
#include "formats/data/preference_dataset.h"
#include "formats/data/prompt_dataset.h"
#include "formats/data/tokenizer.h"
#include "formats/data/token_dataset.h"
#include "formats/tensorboard/event_file.h"
#include "nlohmann/json_fwd.hpp"
#include "parallel/comm/process_groups.h"
#include "parallel/models/decoder.h"
#include "parallel/objectives/dpo_objective.h"
#include "parallel/objectives/grpo_objective.h"
#include "parallel/objectives/grpo_rows.h"
#include "parallel/pipeline/pipeline_runner.h"
#include "parallel/train/trainer_options.h"
#include "parallel/zero/zero_optimizer.h"
#include "rewards/reward_set.h"

namespace tessera::parallel {

struct StepStats {
  int64_t step = 0;           // Steps completed, counting from 1.
  double loss = 0;            // The objective: mean cross-entropy over every token of the global batch
                              // (+ aux_loss_coef × aux_loss for a Mixture of Experts).
  // Mixture of Experts: the cross-entropy alone, the balancing loss (transformers' aux_loss, unscaled),
  // both averaged over micro-batches and ranks as the loss; and per sparse block the tokens routed to
  // its busiest expert over the mean (1: balanced), summed over the step and the data-parallel ranks.
  std::optional<double> lm_loss, aux_loss;
  std::vector<double> expert_imbalance;
  // The objective's metrics (Objective::metric_names: DPO's rewards_chosen, ...), averaged over the
  // step's micro-batches and ranks as the loss.
  std::vector<std::pair<std::string, double>> objective_metrics;
  double lr = 0;
  double grad_norm = 0;       // Global L2 norm before clipping.
  double step_seconds = 0;
  double tokens_per_s = 0;
  int64_t tokens = 0;         // Tokens of this step (global).
  std::optional<int64_t> trained_tokens;  // SFT data: the trained targets of this step (global).
  int64_t bytes_all_reduced = 0;  // By this rank in this step.
  int64_t bytes_communicated = 0;  // By this rank in this step, every group (Communicator::bytes_communicated).
  int64_t optimizer_state_bytes = 0;  // AdamW state (and separate fp32 master weights) held by this rank.
  int64_t frozen_param_bytes = 0;     // LoRA: the frozen base weights this rank holds (no gradient, no state).
  int64_t model_state_bytes = 0;      // Peak this step: parameters, gradients, masters and moments.
  double pipeline_wait_s = 0;         // pp > 1: time this rank waited for activations / gradients.
  // zb1p / zbv: the most bytes this rank's B's kept for their W's at once this step (the split
  // linears' inputs and output gradients, the other parameters' gradients).
  int64_t weight_pending_peak_bytes = 0;
  // pp > 1: the pipeline's bubble this step, over its stages: 1 − Σ (each stage's pipeline time −
  // its waits) / (pp · the longest stage's pipeline time) — the idle share of the pipelined passes.
  std::optional<double> pipeline_bubble;
  int64_t rss_peak_bytes = 0;         // Peak resident memory of this process since training began.
  int64_t live_peak_bytes = 0;        // Peak bytes of host tensors alive in this step (0 unless the
                                      // process installed the counter, parallel/device/live_bytes.h).
  bool skipped = false;               // fp16: gradients overflowed, no update, loss scale halved.
  double loss_scale = 1;              // fp16: the scale this step's backward used.
  std::optional<double> val_loss;     // After an evaluation at this step (Trainer::Evaluate).
  double eval_seconds = 0;
  // DPO: on the first step of a run that scored the reference before it (Init), that pass's seconds.
  std::optional<double> reference_seconds;
  // With val_loss on preference pairs: the objective's metrics over the validation pairs, named
  // "val_" + the metric's name.
  std::vector<std::pair<std::string, double>> val_objective_metrics;
  // checkpoint.async: on a checkpoint step, how long the step was held (waiting for the previous
  // background write, then the snapshot) and the host bytes of the snapshot; on the first step after a
  // background write ended, its step and how long it took.
  std::optional<double> checkpoint_blocked_s;
  int64_t checkpoint_snapshot_bytes = 0;
  std::optional<double> checkpoint_write_s;
  int64_t checkpoint_write_step = 0;
};

class Trainer {
 public:
  // Builds the model (initialised from the seed, or init_from), opens the data, and loads the newest
  // checkpoint under options.checkpoint_dir when one exists (any dp/tp layout; model sizes must
  // match). Fails with a message naming the problem.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options, ProcessGroups groups);
  // Waits for a background checkpoint write, if one is running (it is given up when its peers' votes
  // do not come: a failed attempt's ranks exit).
  ~Trainer();

  // Trains from the current step to options.steps. Rank 0 appends to output_dir/steps.jsonl (cut
  // back to the resumed step first). Checkpoints every checkpoint_every steps and at the end.
  absl::Status Run(const std::function<void(const StepStats&)>& on_step = nullptr);

  // One optimizer step.
  absl::StatusOr<StepStats> Step();

  // The validation loss of the current weights: the mean loss over every token of eval_batches
  // global batches of validation samples 0, 1, 2, ... (the same samples at every evaluation, wrapping
  // around a smaller validation set), read and split over the ranks as a training step's, forward
  // passes only; on preference pairs, the objective's mean over those pairs (and its metrics:
  // eval_metrics()). A collective over every rank. Fails when the job has no validation data.
  absl::StatusOr<double> Evaluate();
  // The objective's metrics of the last Evaluate() on preference pairs ("val_" names); empty otherwise.
  const std::vector<std::pair<std::string, double>>& eval_metrics() const { return eval_metrics_; }
  // Whether Run evaluates after the current step.
  bool EvaluatesNow() const;

  int64_t step() const { return step_; }
  Decoder& model() { return *model_; }

  enum class What { kParams, kGrads, kExpAvg, kExpAvgSq };
  // Full tensors by documented name, gathered over tp (a collective over this rank's tp group) and,
  // with pipeline stages, over pp to pp rank 0 (by the tp rank 0 of every stage): complete on the
  // ranks whose tp and pp coordinates are 0, this stage's tensors elsewhere.
  absl::StatusOr<std::map<std::string, at::Tensor>> GatherFull(What what);

  // Writes the checkpoint of the current step, a collective over every rank: rank 0 (and, with a
  // sharded optimizer, every rank) writes and fsyncs its files, and rank 0 commits the checkpoint only
  // when every rank reported its files written (docs/checkpoint-format.md, "Commit"). Every rank
  // returns the same verdict; on failure the previous checkpoints are untouched.
  // With checkpoint.async: the snapshot (the collective part) now, the files written and committed by
  // a background thread (WaitForCheckpoint), and the verdict is rank 0's alone.
  absl::Status SaveCheckpoint();
  // checkpoint.async: waits until the background write (if any) ended; its error, if it failed.
  absl::Status WaitForCheckpoint();

 private:
  Trainer(const TrainerOptions& options, ProcessGroups groups);
  absl::Status Init();
  // Init's parts: the training (and validation) data; the starting weights (the newest checkpoint,
  // with its optimizer state, else model.init_from or model.pretrained, else the seed's); the
  // optimizer over the model's parameters in `dtype`.
  absl::Status OpenData();
  absl::Status LoadInitialWeights();
  // model.init_from's or model.pretrained's weights into `model` (this rank's part); nothing without.
  absl::Status LoadStartingWeights(Decoder& model) const;
  absl::Status CreateOptimizer(at::ScalarType dtype);
  // Step's parts, in order. ForwardBackward: this step's backward passes (the pipeline's schedule or
  // `accum` micro-batches), returning the sum of their losses. ReduceLossAndNorm (after
  // ZeroOptimizer::ReduceGradients): the step's mean loss over the job and the global gradient norm
  // (still scaled by the fp16 loss scale); collectives over pp and dp × sp. Update: the fp16 overflow
  // skip or clipping and AdamW at `lr`.
  // Sums over this step's micro-batches: cross-entropy, balancing loss, and tokens per expert of each
  // sparse block ([sparse blocks held, E], fp64; undefined for a dense model).
  struct LossSums {
    double lm = 0;
    double aux = 0;
    at::Tensor expert_load;
    std::vector<double> metrics;  // The objective's (Objective::TakeMetrics).
  };
  absl::StatusOr<LossSums> ForwardBackward(int accum);
  // Preference data (train.objective dpo or reward; trainer_preference.cc). A PairSet is the pairs
  // the job trains on (data.path's, but a held-out tail) or validates on (data.valid_path's, or that
  // tail): pairs [first, first + count) of `data`, global pair g of the set being set pair g mod count
  // or with `shuffle` (training's data.shuffle) the permutation of its epoch (PairOf).
  struct PairSet {
    const formats::data::PreferenceDataset* data = nullptr;  // Null: no such set (no validation).
    int64_t first = 0;
    int64_t count = 0;
    bool shuffle = false;
    std::string field;  // The spec field it comes from, for messages ("data.path", "data.valid_path"),
    std::string path;   // and that field's value.
    // The global pairs the job reads of it: min(count, steps · global_batch) for training,
    // min(count, eval_batches · global_batch) for validation (global pairs [0, read), wrapping).
    int64_t read = 0;
    // DPO: the reference's log-probability of set pair i's chosen (2i) and rejected (2i + 1)
    // completion — −inf where not scored — restored from the checkpoint on a resume.
    std::vector<double> reference;
    uint64_t fingerprint = 0;  // CheckPairs.
    // The set pair of global pair g: g mod count, or the permutation of its epoch
    // (TokenDataset::Permutation with seed `seed` + epoch, as SFT samples are shuffled).
    int64_t PairOf(int64_t g, uint64_t seed) const;
    mutable int64_t permutation_epoch = -1;  // PairOf's cache.
    mutable std::vector<int64_t> permutation;
  };
  // ReadPairs: micro-batch a (of accum) of this rank's share of the global batch of `set`'s pairs
  // starting at global pair `first`, each pair as two rows of seq_len + 1 ids — the prompt then the chosen
  // completion, the prompt then the rejected one — right-padded with −1: [2·micro, seq_len + 1], under
  // sequence parallelism this rank's block of them [2·micro, seq_len/sp + 1] (SFT
  // data's encoding, formats/data/token_dataset.h). DPO: the prompt's targets untrained (−id − 1), the
  // completion's trained. Reward: every token untrained and one trained target (token 0) after the
  // last, so that the only trained position is the last token's (the score head's; Decoder::Head).
  // PairsOf: the set pairs of those rows, in order. ReferenceOf: their reference log-probabilities
  // [2·micro] fp64 (chosen, rejected per pair). MarginsOf: their margins [2·micro] fp64 (the pair's at
  // both rows). ScoreReference: the reference's log-probability of every row of the pairs the job
  // will read of each set, with the initial weights or dpo.reference's — a collective over every rank.
  // With `counted`, also which of the returned rows' input positions hold a token of the pair (1) or
  // padding (0), [rows, positions] fp64 on the device; CountedOf returns just those (the routers'
  // statistics leave the padding out, as transformers' balancing loss with an attention mask).
  // Shared-prompt rows (SharedPromptRows(); pair_rows.h WriteSharedPromptRow, DPO's trained targets
  // the completions', a reward model's the one after each completion's last token): one row a pair
  // of 2·seq_len + 2 ids, [micro, 2·seq_len + 2]; PairPositionsOf their inputs' positions
  // [micro, 2·seq_len + 1]; ReferenceOf and MarginsOf [micro, 3] (the pair's two values, the
  // rejected branch's first input index; MarginsOf's 0 without margins).
  absl::StatusOr<at::Tensor> ReadPairs(const PairSet& set, int64_t first, int a, int accum,
                                       at::Tensor* counted = nullptr);
  absl::StatusOr<at::Tensor> PairPositionsOf(const PairSet& set, int64_t first, int a, int accum);
  // A pair `p` of `set` fits a shared-prompt row: each completion 1 .. PairLimit() tokens with the prompt.
  absl::Status CheckRowPair(const PairSet& set, int64_t p, const formats::data::PreferencePair& pair) const;
  // A forward pass's positions of `set`'s global batch from `first` (PairPositionsOf), null for
  // separate rows. `set` must outlive it.
  std::function<absl::StatusOr<at::Tensor>(int)> PositionsOf(const PairSet& set, int64_t first, int accum);
  // Shared-prompt rows: values (a pair's two values, so far) gets the pair's RejectedStart.
  absl::Status AppendRejectedStart(const PairSet& set, int64_t i, std::vector<double>* values) const;
  // A micro-batch's per-pair values on the device: [micro, 3] for shared-prompt rows, else this
  // rank's chunk of [2·micro].
  at::Tensor PairValuesOf(std::vector<double> values) const;
  PairRows PairRowsOf() const { return SharedPromptRows() ? PairRows::kSharedPrompt : PairRows::kSeparate; }
  PairTargets SharedRowTargets() const { return reward() ? PairTargets::kLastTokens : PairTargets::kCompletions; }
  // The index of pair `pair`'s rejected branch in its shared-prompt row: prompt + chosen tokens.
  static int64_t RejectedStart(const formats::data::PreferencePair& pair) {
    return static_cast<int64_t>(pair.prompt.size() + pair.chosen.size());
  }
  absl::StatusOr<at::Tensor> CountedOf(const PairSet& set, int64_t first, int a, int accum);
  absl::StatusOr<at::Tensor> MarginsOf(const PairSet& set, int64_t first, int a, int accum) const;
  bool dpo() const { return options_.objective_kind == layout::Objective::kDpo; }
  // Whether pairs are shared-prompt rows (DPO and reward models): on the CPU, where Decoder::Loss
  // leaves out a row's padding (one pipeline stage, no sequence parallelism, 1D tp, a dense model, no
  // LoRA dropout) — elsewhere a wider row would cost more than the prompt saved. Not on CUDA until
  // measured there: its rows need an explicit attention mask, [B, 1, 2T + 1, 2T + 1] per layer, where
  // two rows take the fused causal kernel.
  bool SharedPromptRows() const;
  bool reward() const { return options_.objective_kind == layout::Objective::kReward; }
  // The longest pair (prompt + completion) a row holds: seq_len + 1 for DPO (the last token is only
  // a target), seq_len for a reward model (the last token is scored as an input).
  int64_t PairLimit() const { return options_.model.seq_len + (reward() ? 0 : 1); }
  // OpenPairs: data.path's pairs, its held-out tail (data.valid_fraction) or data.valid_path's, as
  // train_pairs_ and valid_pairs_, each checked (CheckPairs). CheckPairs: every rank reads every pair
  // of the set (cut) and fails on an id ≥ vocab or a pair the job reads longer than PairLimit() —
  // before any collective — and sets its fingerprint. CheckReference: each pair the job reads has
  // finite reference log-probabilities at most 0 (FailedPrecondition naming train.steps for unscored ones).
  absl::Status OpenPairs();
  absl::Status CheckPairs(PairSet& set);
  absl::Status CheckReference(const PairSet& set, const std::string& where) const;
  // reference.safetensors in a checkpoint: its metadata (what the log-probabilities were scored from)
  // and, on a resume, the tables read back and checked against this job (LoadReference).
  std::map<std::string, std::string> ReferenceMetadata() const;
  absl::Status LoadReference(const std::string& file);
  std::vector<int64_t> PairsOf(const PairSet& set, int64_t first, int a, int accum) const;
  absl::StatusOr<at::Tensor> ReferenceOf(const PairSet& set, int64_t first, int a, int accum) const;
  absl::Status ScoreReference();
  // ScoreReference's pass over one set with `model` (runner's), into set.reference.
  absl::Status ScoreSet(PipelineRunner& runner, Decoder& model, PairSet& set);
  // Evaluate on preference pairs (valid_pairs_).
  absl::StatusOr<double> EvaluatePairs();
  // dpo.reference PATH: a model built like model_ (this rank's part, its flags, `dtype`) holding the
  // weights of PATH, checked against the spec's model (CheckModelMatches) — scored once and freed.
  // *step: the checkpoint's step read (its newest, for a checkpoint directory), −1 for a transformers
  // directory. This rank's verdict only (ScoreReference makes it every rank's).
  absl::StatusOr<std::unique_ptr<Decoder>> LoadReferenceModel(int64_t* step) const;
  // train.objective grpo (trainer_grpo.cc): OpenPrompts opens data.path's prompt dataset and its
  // tokenizer, checks that every prompt the job reads leaves room for a whole completion (before any
  // collective), and on global rank 0 starts the reward functions. PromptOf: the dataset prompt of
  // global prompt g (g mod N, or data.shuffle's permutation of its epoch). GrpoAccumulation: this
  // rank's micro-batches per step, global_batch / dp · num_generations / micro_batch.
  // GenerateRollouts: the step's sampling, rewards and advantages (a collective over every rank),
  // into grpo_rows_, grpo_metrics_ and rollouts.jsonl; GrpoTokensOf / GrpoDataOf: micro-batch a of
  // this rank's rows and their objective data, on the device. TrimRolloutLog: rollouts.jsonl cut back
  // to the resumed step (rank 0).
  bool grpo() const { return options_.objective_kind == layout::Objective::kGrpo; }
  absl::Status OpenPrompts();
  int64_t PromptOf(int64_t g) const;
  // Dataset prompt i, its ids cut to data.max_prompt_tokens from the left (its text whole, for the rewards).
  absl::StatusOr<formats::data::PromptRow> ReadPrompt(int64_t i) const;
  int GrpoAccumulation() const;
  absl::Status GenerateRollouts();
  absl::StatusOr<at::Tensor> GrpoTokensOf(int a) const;
  absl::StatusOr<at::Tensor> GrpoDataOf(int a) const;
  absl::Status TrimRolloutLog();
  // The text a reward sees of completion ids (decoded before the stop token, special tokens skipped).
  std::string CompletionText(const std::vector<int64_t>& ids) const;
  // Global rank 0 scores `batch` (its own; `prepared`: why it could not be made) while the other ranks
  // wait, heartbeats keeping their waits short of the collective timeout; every rank returns the
  // rewards [function][completion] of the `total` completions, or rank 0's error.
  absl::StatusOr<std::vector<std::vector<double>>> ScoreOnRankZero(std::vector<rewards::ScoredCompletion> batch,
                                                                   int64_t total, const absl::Status& prepared);
  // grpo.beta > 0: the frozen reference (the initial weights; none under LoRA, whose reference is the
  // base model, the adapters off), and its log-probabilities of a completion's tokens at the sampling
  // temperature (this rank's tp group in lockstep).
  absl::Status CreateGrpoReference();
  absl::StatusOr<std::vector<double>> ReferenceLogps(const std::vector<int64_t>& prompt,
                                                     const std::vector<int64_t>& completion);
  std::unique_ptr<Decoder> grpo_reference_;
  // OpenRewards (after the device is chosen): rank 0 starts the reward functions, every rank gets its
  // verdict. Rank 0: the reward models of grpo.rewards (kind model) by function index, each checked (a
  // score head, the policy's vocabulary, positions for the longest row it scores), and their scores of
  // a batch (RewardSet's ModelScorer).
  absl::Status OpenRewards();
  absl::Status LoadRewardModels();
  // The most tokens a reward model scores: the longest whole prompt the job reads + max_completion_tokens.
  int64_t longest_scored_ = 0;
  absl::StatusOr<std::vector<double>> ScoreWithRewardModel(Decoder& model,
                                                           const std::vector<rewards::ScoredCompletion>& batch);
  std::map<size_t, std::unique_ptr<Decoder>> reward_models_;
  std::unique_ptr<formats::data::PromptDataset> prompts_;
  std::unique_ptr<formats::data::Tokenizer> prompt_tokenizer_;
  std::unique_ptr<rewards::RewardSet> rewards_;  // Global rank 0 only.
  std::shared_ptr<GrpoObjective> grpo_objective_;
  GrpoRows grpo_rows_;  // This rank's rows of the current step.
  // The step's numbers for steps.jsonl: the rewards' (reward, reward_std, frac_reward_zero_std,
  // reward_NAME), then — after the objective's — the completions' and the sampler's.
  std::vector<std::pair<std::string, double>> grpo_metrics_, grpo_completion_metrics_;
  int64_t grpo_generated_tokens_ = 0;
  mutable int64_t prompt_permutation_epoch_ = -1;  // PromptOf's cache.
  mutable std::vector<int64_t> prompt_permutation_;
  // A model of this rank's part of the spec's model (its pipeline chunks, experts, sequence and expert
  // parallelism, kernels and FP8) with the seed's weights, as Init builds model_.
  std::unique_ptr<Decoder> NewModel() const;
  // Micro-batches this rank runs per step, training or evaluating: global_batch / (micro_batch · dp)
  // (layout::MicroBatchesPerStep; validation made the division exact).
  int Accumulation() const;
  // `saved` (the model of a checkpoint resumed, or of dpo.reference's checkpoint or directory, named
  // `what`) has the spec's family and sizes. A checkpoint resumed: and seq_len (its other choices are
  // checked by its tensors). A reference: not seq_len (rotary positions need none; a transformers
  // directory has none), but q/k/v biases, tied embeddings and the head.
  absl::Status CheckModelMatches(const ModelConfig& saved, const std::string& what, bool reference) const;
  // Grid tensor parallelism: `means` (this rank's means of its micro-batches' parts) averaged over the
  // axes that split the samples (a collective over each); nothing otherwise.
  absl::Status AverageOverSampleAxes(at::Tensor& means);
  absl::Status ReduceLossAndNorm(LossSums& sums, int accum, StepStats* s, double* raw_norm);
  absl::Status Update(double norm, double lr, StepStats* s);
  // pp > 1, every stage together: StepStats::pipeline_bubble of the last RunStep.
  absl::StatusOr<double> PipelineBubble();
  // zb1p and zbv, every rank together: the schedule made again from the job's mean measured forward, B and W
  // times of the last step (until then: F = B = W). Once, after kScheduleFromStep steps of this
  // process (the first pays for first-touch allocations).
  static constexpr int kScheduleFromStep = 2;
  absl::Status ScheduleFromMeasuredCosts();
  absl::Status LoadCheckpoint(const std::string& path);
  // SaveCheckpoint's parts: dp rank 0's gathers and global rank 0's files (model, optimizer,
  // trainer_state.json); rank 0's commit after the vote (index.json, rename, pruning). Failures of
  // files go into the CheckpointWrite's status (every rank still votes); a returned error is a
  // failed collective.
  struct CheckpointWrite;
  absl::Status WriteGatheredCheckpointFiles(CheckpointWrite& w, const std::vector<at::Tensor>& local_params,
                                            const std::vector<at::Tensor>& local_m,
                                            const std::vector<at::Tensor>& local_v);
  void CommitCheckpointFiles(CheckpointWrite& w, const at::Tensor& votes);
  // SaveCheckpoint's phases: the gathers, the temporary directory and this rank's files (or their
  // snapshot: CheckpointWrite::deferred), the temporary directory removed if it fails; then the vote
  // over every rank and rank 0's commit.
  absl::Status PrepareCheckpoint(CheckpointWrite& w);
  absl::Status VoteAndCommit(CheckpointWrite& w);
  // This rank's part of the vote: [world + 2·shards] int64, slot r of the first `world` entries 1
  // when rank r failed; with sharded state then (bytes, crc32c) of the file of dp rank d, tp rank t at
  // slot d·tp + t. Summed over every rank, it is what CommitCheckpointFiles reads.
  at::Tensor OwnVote(const CheckpointWrite& w) const;
  // checkpoint.async (trainer_async_checkpoint.cc): SnapshotCheckpoint waits for the previous write
  // and prepares the next (deferred) into snapshot_, timing both (the step is held meanwhile);
  // StartBackgroundCheckpoint hands it to a thread that writes this rank's files and votes through
  // the temporary directory (a file per rank), where rank 0 commits once every vote is in.
  struct BackgroundCheckpoint;
  absl::Status SnapshotCheckpoint();
  absl::Status StartBackgroundCheckpoint();
  bool BackgroundCheckpointEnded() const;  // A write was started and has ended (WaitForCheckpoint returns at once).
  void WriteInBackground(BackgroundCheckpoint& b);
  std::unique_ptr<CheckpointWrite> snapshot_;
  std::unique_ptr<BackgroundCheckpoint> background_;
  double snapshot_blocked_s_ = 0;
  std::optional<double> reference_seconds_;  // Init's scoring of DPO's reference, until a step reports it.
  // The newest write that ended and was not yet reported: (step, seconds); background, or synchronous
  // (which held training all that time).
  std::optional<std::pair<int64_t, double>> write_ended_;
  // Rank 0 picks the newest checkpoint whose files match its index (setting damaged ones aside, with a
  // line in its log) and tells every rank; -1 when there is none.
  absl::StatusOr<int64_t> AgreeOnResumeStep();
  nlohmann::json TrainerStateJson(bool sharded_state) const;
  nlohmann::json DataStateJson() const;
  // Per-parameter tp-local m and v for this rank from the per-rank files of a sharded checkpoint
  // written with `saved_tp` tp ranks (any dp).
  absl::Status LoadShardedOptimizer(const std::string& path, int saved_tp);
  absl::Status AppendStepLog(const StepStats& stats);
  // This attempt's claim on the output directory (options_.fence; unfenced for `tessera run`).
  formats::checkpoint::AttemptFence Fence() const { return formats::checkpoint::AttemptFence(options_.output_dir, options_.fence); }
  // Full-size (tp-local) m and v per parameter, whichever optimizer holds them (collective over dp
  // when sharded).
  absl::Status LocalOptimizerState(std::vector<at::Tensor>* m, std::vector<at::Tensor>* v);
  // Full tensors by name from this rank's per-parameter parts (a collective over the tp group).
  absl::StatusOr<std::map<std::string, at::Tensor>> GatherOverTp(const std::vector<at::Tensor>& local);
  // Pipeline: pp rank 0 receives every later stage's full tensors (names it lacks) into `full`;
  // the others send theirs. A collective over the pp group; fp32 tensors.
  absl::Status GatherOverPp(std::map<std::string, at::Tensor>* full);
  // Expert parallelism: ep rank 0 receives the other ep ranks' expert tensors into `full`; they send
  // theirs. A collective over the ep group (tp rank 0's); fp32 tensors.
  absl::Status GatherOverEp(std::map<std::string, at::Tensor>* full);
  // Micro-batch a (of accum) of this rank's share of the global batch whose first sample is `first`.
  // With `positions` and packed data: also this rank's positions of the micro-batch's inputs
  // [micro, T] (Decoder::set_positions); undefined otherwise.
  // Grid tensor parallelism: this rank's chunk of a micro-batch's rows (dim 0, sample-major; pairs
  // stay whole: train.micro_batch is a multiple of the chunks), as every reader cuts them; else `rows`.
  at::Tensor SampleChunkOf(const at::Tensor& rows) const;
  absl::StatusOr<at::Tensor> ReadMicroBatch(formats::data::TrainingData& data, int64_t first, int a, int accum,
                                            at::Tensor* positions = nullptr);
  // The PipelineRunner's two questions about a micro-batch, answered with one read: its tokens
  // (ReadTokens keeps packed data's positions of the same read), then its positions (ReadPositions
  // hands those over, or reads them: a middle pipeline stage reads no tokens).
  absl::StatusOr<at::Tensor> ReadTokens(formats::data::TrainingData& data, int64_t first, int a, int accum);
  absl::StatusOr<at::Tensor> ReadPositions(formats::data::TrainingData& data, int64_t first, int a, int accum);
  struct ReadAhead {
    const formats::data::TrainingData* data = nullptr;
    int64_t first = -1;
    int a = -1;
    at::Tensor positions;
  } read_ahead_;
  absl::Status TrimStepLog();
  // Something the user should see (a damaged checkpoint set aside, TensorBoard events that stopped, a
  // background checkpoint write that failed): on this rank's log at once as "tessera: warning: ...",
  // and on rank 0 kept for the step log, where FlushWarnings writes it as a warning line
  // (common/steplog) that `tessera run` prints and the worker forwards to the coordinator (`tessera
  // status`, `submit --wait`). Thread-safe (the background checkpoint writer warns too).
  void Warn(const std::string& message);
  // Rank 0: the warnings kept since the last flush, appended to the step log at `step_` (after the
  // fence check); called by TrimStepLog and before each step line.
  absl::Status FlushWarnings();
  std::mutex warnings_mu_;
  std::vector<std::string> pending_warnings_;  // Guarded by warnings_mu_.
  // Rank 0: the job's TensorBoard event file (opened by TrimStepLog; null when it cannot be written).
  std::unique_ptr<formats::tensorboard::EventFileWriter> events_;
  // Communicator::bytes_communicated summed over this rank's distinct groups.
  int64_t BytesCommunicated() const;
  absl::Status DumpDebug();
  // One progress line on stderr (the rank's log): step, loss, tokens/s, step time, memory.
  void LogProgress(const StepStats& stats) const;

  TrainerOptions options_;
  ProcessGroups groups_;
  c10::Device device_{c10::kCPU};
  std::unique_ptr<Decoder> model_;
  // SFT data: the trained targets of the current step's global batch, and the weight each gets.
  // SFT data: counts the trained targets of `data`'s global batch starting at sample `first` (every
  // rank, from the mask files), and weighs the model's targets so that the batch's loss is their
  // cross-entropy summed over that count (0 targets: weight 0). Sets *trained (the batch's
  // global_batch · seq_len for token streams).
  absl::Status WeighTrainedTargets(formats::data::TrainingData& data, int64_t first, int accum, int64_t* trained);
  // LoRA: the adapters from a PEFT adapter directory (model.lora.init_from), its config checked
  // against model.lora.
  absl::Status LoadPeftAdapter(const std::string& dir);
  int64_t trained_targets_ = 0;
  std::unique_ptr<formats::data::TrainingData> data_;
  std::unique_ptr<formats::data::TrainingData> valid_;  // Validation samples; null without validation data.
  // train.objective dpo or reward (data_ is null then): data.path's pairs and data.valid_path's (null
  // without), and the sets read of them.
  std::unique_ptr<formats::data::PreferenceDataset> pairs_;
  std::unique_ptr<formats::data::PreferenceDataset> valid_file_;
  PairSet train_pairs_, valid_pairs_;
  std::vector<std::pair<std::string, double>> eval_metrics_;  // Evaluate's on pairs.
  // The objective the model computes (options_.objective, DPO's, a reward model's, or null for the
  // default): its metrics.
  std::shared_ptr<const Objective> objective_;
  // Pipeline parallelism (pp > 1): this rank's chunks of the model; null without.
  std::unique_ptr<StageLayout> layout_;
  // Every layout's one step path: layout_'s schedule, or the whole model as a one-stage pipeline
  // (one_stage_), with these options.
  std::unique_ptr<PipelineRunner> pipeline_;
  std::unique_ptr<StageLayout> one_stage_;
  PipelineOptions pipeline_options_;
  at::ScalarType param_dtype_ = at::kFloat;  // train.precision's parameter and activation type.
  int pipeline_steps_ = 0;  // Steps this process has run through pipeline_.
  // The optimizer of every layout (stage 0 included): gradient reduction, norm, AdamW (parallel/zero).
  std::unique_ptr<ZeroOptimizer> zero_;
  // Optimizer state (tp-local, CPU) from a checkpoint, until the optimizer exists.
  std::vector<at::Tensor> pending_m_, pending_v_;
  int64_t step_ = 0;
  int64_t rss_base_bytes_ = 0;  // Resident memory before the model was built.
  // Rank 0's step log (TrimStepLog): the step this run started from, and how many logged steps of
  // earlier runs past it it dropped (work recomputed). Written on every step line.
  int64_t resumed_from_ = 0;
  int64_t discarded_steps_ = 0;
  int64_t adam_step_ = 0;       // Updates applied (fp16 skips do not count): Adam's bias correction t.
  double loss_scale_ = 1;       // fp16 dynamic loss scale.
  // Loss-free balancing (model.router_bias_rate > 0): every block's router bias, [layers, E] fp32 on
  // the device, the same on every rank (each updates it from the step's load summed over every rank);
  // and that load, [layers, E] fp64 on the CPU, from ReduceLossAndNorm.
  at::Tensor router_bias_;
  at::Tensor step_load_;
  // After an applied update: b += rate · sign(mean load − load) per sparse block.
  void UpdateRouterBias();
  // The weight of one micro-batch's loss in the step's objective: the fp16 loss scale over the step's
  // micro-batches in the job (accum on each of the dp × sp ranks).
  double LossWeight(int accum) const;
  // Router jitter's seed for micro-batch a (of accum) of this step on this rank (RouterStats::noise_seed).
  uint64_t NoiseSeed(int a, int accum) const;
  int64_t good_steps_ = 0;      // fp16: steps since the last overflow or growth.
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_TRAIN_TRAINER_H_
