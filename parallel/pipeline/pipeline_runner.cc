#include "parallel/pipeline/pipeline_runner.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace tessera::parallel {

using formats::model::ModelPart;

ModelPart PartOfRank(const StageLayout& layout, int rank) {
  ModelPart part;
  part.embedding = part.head = false;
  for (const ModelChunk& c : layout.ChunksOf(rank)) {
    for (int i = 0; i < c.num_layers; ++i) part.layers.push_back(c.first_layer + i);
    part.embedding |= c.embedding;
    part.head |= c.head;
  }
  return part;
}

absl::StatusOr<std::unique_ptr<PipelineRunner>> PipelineRunner::Create(Decoder* model, const StageLayout& layout,
                                                                       std::shared_ptr<Communicator> pp,
                                                                       const PipelineOptions& options) {
  if (pp->size() != layout.pp()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline group has ", pp->size(), " ranks, the layout ",
                                                   layout.pp(), " stages"));
  }
  auto actions = MakeSchedule(options.schedule, layout.pp(), layout.chunks(), pp->rank(), options.micro_batches);
  if (!actions.ok()) return actions.status();
  if (layout.placement() != layout::PlacementOf(options.schedule)) {
    return absl::InvalidArgumentError(absl::StrCat("parallel.pp_schedule: ", layout::Name(options.schedule),
                                                   " does not run on this layout's stage placement"));
  }
  std::vector<ModelChunk> chunks = layout.ChunksOf(pp->rank());
  std::vector<int> rank_of_stage;
  for (int s = 0; s < layout.num_virtual_stages(); ++s) rank_of_stage.push_back(layout.RankOfStage(s));
  const bool split = std::any_of(actions->begin(), actions->end(), [](const PipeAction& a) { return a.op == PipeOp::kWeight; });
  std::unique_ptr<PipelineRunner> runner(new PipelineRunner(model, std::move(chunks), std::move(rank_of_stage),
                                                            std::move(pp), options, split));
  if (absl::Status s = runner->SetActions(std::move(*actions)); !s.ok()) return s;
  return runner;
}

absl::Status PipelineRunner::SetActions(std::vector<PipeAction> actions) {
  // A split schedule ends with the W's of the last micro-batch, one per chunk: they run together
  // (RunStep), so that a parameter both chunks use (rank 0's embedding and tied head under zbv)
  // accumulates once while the step's reduction is armed.
  size_t final_begin = actions.size();
  if (split_) {
    const int m = options_.micro_batches, chunks = static_cast<int>(chunks_.size());
    std::vector<bool> seen(chunks, false);
    for (int k = 0; k < chunks && final_begin > 0; ++k) {
      const PipeAction& a = actions[final_begin - 1];
      if (a.op != PipeOp::kWeight || a.micro_batch != m - 1 || a.chunk < 0 || a.chunk >= chunks || seen[a.chunk]) break;
      seen[a.chunk] = true;
      --final_begin;
    }
    if (actions.size() - final_begin != static_cast<size_t>(chunks)) {
      return absl::InternalError(absl::StrCat("pipeline schedule: rank ", pp_->rank(), "'s actions do not end with the "
                                              "weight gradients of micro-batch ", m - 1, " of each of its ", chunks,
                                              " chunks"));
    }
  }
  actions_ = std::move(actions);
  final_weights_ = final_begin;
  return absl::OkStatus();
}

int PipelineRunner::Tag(Kind kind, int micro_batch, int virtual_stage) const {
  const int stages = static_cast<int>(rank_of_stage_.size());
  return (static_cast<int>(kind) * stages + virtual_stage) * options_.micro_batches + micro_batch;
}

void PipelineRunner::SendTo(const at::Tensor& payload, Kind kind, int micro_batch, int virtual_stage) {
  const int tag = Tag(kind, micro_batch, virtual_stage);
  const int to = rank_of_stage_[virtual_stage];
  if (to == pp_->rank()) {
    local_[tag] = payload.clone();  // The sender may reuse its tensor; the receiver gets its own.
    return;
  }
  if (kind == Kind::kActivation || kind == Kind::kGradient) bytes_sent_ += payload.numel() * payload.element_size();
  sends_.push_back(pp_->SendAsync(payload, to, tag));
}

absl::Status PipelineRunner::RecvFrom(at::Tensor& into, Kind kind, int micro_batch, int virtual_stage, int from_stage) {
  const int tag = Tag(kind, micro_batch, virtual_stage);
  const int from = rank_of_stage_[from_stage];
  if (from == pp_->rank()) {
    auto it = local_.find(tag);
    if (it == local_.end()) {
      return absl::InternalError(absl::StrCat("pipeline schedule: virtual stage ", virtual_stage, " of micro-batch ",
                                              micro_batch, " waits for this rank's virtual stage ", from_stage,
                                              ", which has not run"));
    }
    into = std::move(it->second);
    local_.erase(it);
    return absl::OkStatus();
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = pp_->RecvAsync(into, from, tag)->Wait();
  if (kind == Kind::kActivation || kind == Kind::kGradient) {
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return s;
}

at::Tensor PipelineRunner::EmptyActivation() const {
  const at::Tensor& any = model_->params().at(0).value;
  return at::empty(model_->ActivationShape(options_.micro_batch, options_.seq_len),
                   any.options().dtype(options_.activation_dtype).requires_grad(false));
}

absl::StatusOr<double> PipelineRunner::RunStep(const std::function<absl::StatusOr<at::Tensor>(int)>& batch,
                                               double loss_weight, const std::function<void()>& before_last_backward) {
  const auto started = std::chrono::steady_clock::now();
  // The last action that accumulates gradients: the last backward, or the first of the last
  // micro-batch's W's (run together) when split.
  size_t last_backward = final_weights_;
  if (!split_) {
    for (size_t i = 0; i < actions_.size(); ++i) {
      if (actions_[i].op == PipeOp::kBackward) last_backward = i;
    }
  }
  WeightGradStore::set_splitting(split_);
  absl::Cleanup not_splitting = [] { WeightGradStore::set_splitting(false); };
  double loss_sum = 0;
  in_flight_ = peak_in_flight_ = 0;
  pending_bytes_ = pending_peak_bytes_ = 0;
  bytes_sent_ = 0;
  wait_seconds_ = 0;
  double busy[3] = {0, 0, 0};  // Seconds of forwards, backwards (B when split) and W's, waits excluded.
  int count[3] = {0, 0, 0};
  aux_sum_ = 0;
  expert_load_ = at::Tensor();
  absl::Status status;
  try {
    for (size_t i = 0; i < actions_.size() && status.ok(); ++i) {
      const PipeAction& a = actions_[i];
      if (i == last_backward && before_last_backward) before_last_backward();
      const auto action_start = std::chrono::steady_clock::now();
      const double waited = wait_seconds_;
      if (a.op == PipeOp::kForward) {
        status = Forward(a, batch, options_.positions, options_.sample_data, &loss_sum);
      } else if (a.op == PipeOp::kBackward) {
        status = Backward(a, loss_weight);
      } else if (i < final_weights_) {
        status = Weight({a});
      } else if (i == final_weights_) {
        status = Weight(std::vector<PipeAction>(actions_.begin() + i, actions_.end()));
      } else {
        continue;  // Ran with the first of the last micro-batch's W's.
      }
      const int k = static_cast<int>(a.op);
      busy[k] += std::chrono::duration<double>(std::chrono::steady_clock::now() - action_start).count() -
                 (wait_seconds_ - waited);
      count[k] += i == final_weights_ ? static_cast<int>(actions_.size() - i) : 1;  // W's run together count each.
    }
  } catch (const c10::Error& e) {
    // Communication inside forward/backward (tp) reports failures as exceptions.
    status = absl::InternalError(e.what_without_backtrace());
  }
  status = Finish(status);
  step_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!status.ok()) return status;
  measured_ = PipeCosts{count[0] ? busy[0] / count[0] : 0, count[1] ? busy[1] / count[1] : 0,
                        count[2] ? busy[2] / count[2] : 0};
  return loss_sum;
}

absl::Status PipelineRunner::Reschedule(const PipeCosts& costs) {
  if (!layout::IsZeroBubble(options_.schedule)) return absl::OkStatus();
  auto all = layout::MakeZeroBubbleSchedule(options_.schedule, pp_->size(), options_.micro_batches, costs);
  if (!all.ok()) return all.status();
  return SetActions(std::move((*all)[pp_->rank()]));
}

absl::StatusOr<double> PipelineRunner::RunForwardOnly(const std::function<absl::StatusOr<at::Tensor>(int)>& batch,
                                                      const std::function<absl::StatusOr<at::Tensor>(int)>& positions,
                                                      const std::function<absl::StatusOr<at::Tensor>(int)>& sample_data) {
  // Every rank runs (micro-batch, chunk) in increasing order, and a forward waits only for the
  // previous virtual stage of its micro-batch, which comes earlier in that order: no deadlock.
  double loss_sum = 0;
  absl::Status status;
  try {
    for (int m = 0; m < options_.micro_batches && status.ok(); ++m) {
      for (int c = 0; c < static_cast<int>(chunks_.size()) && status.ok(); ++c) {
        status = Forward(PipeAction{PipeOp::kForward, m, c}, batch, positions, sample_data, &loss_sum, /*keep=*/false);
      }
    }
  } catch (const c10::Error& e) {
    status = absl::InternalError(e.what_without_backtrace());
  }
  status = Finish(status);
  if (!status.ok()) return status;
  return loss_sum;
}

absl::Status PipelineRunner::Finish(absl::Status status) {
  // Every send is complete before its tensor may go (also after a failure: the peers see it fail).
  for (auto& w : sends_) {
    absl::Status s = w->Wait();
    if (status.ok() && !s.ok()) status = s;
  }
  sends_.clear();
  stash_.clear();
  stores_.clear();
  store_bytes_.clear();
  local_.clear();
  return status;
}

absl::Status PipelineRunner::Forward(const PipeAction& a, const std::function<absl::StatusOr<at::Tensor>(int)>& batch,
                                     const std::function<absl::StatusOr<at::Tensor>(int)>& positions_of,
                                     const std::function<absl::StatusOr<at::Tensor>(int)>& sample_data_of,
                                     double* loss_sum, bool keep) {
  const ModelChunk& chunk = chunks_[a.chunk];
  const int64_t T = options_.seq_len;
  Stash stash;
  at::Tensor tokens;
  if (chunk.embedding || chunk.head) {
    auto t = batch(a.micro_batch);
    if (!t.ok()) return t.status();
    tokens = *t;
  }
  if (positions_of) {
    auto positions = positions_of(a.micro_batch);
    if (!positions.ok()) return positions.status();
    stash.positions = *positions;
  }
  model_->set_positions(stash.positions);
  if (chunk.head && sample_data_of) {
    auto data = sample_data_of(a.micro_batch);
    if (!data.ok()) return data.status();
    model_->set_sample_data(*data);
  }
  auto unset_sample_data = absl::MakeCleanup([&] { model_->set_sample_data({}); });
  if (keep) stash.dropout_seed = options_.noise_seed ? options_.noise_seed(a.micro_batch) : 0;
  model_->set_dropout_seed(stash.dropout_seed);
  if (keep && options_.experts > 0) {
    stash.stats = c10::make_intrusive<RouterStats>(options_.experts);
    if (options_.noise_seed) stash.stats->noise_seed = options_.noise_seed(a.micro_batch);
    if (options_.sp) {
      stash.stats->sequence_block = options_.sp->rank();
      stash.stats->sequence_blocks = options_.sp->size();
    }
    std::tie(stash.stats->sample_block, stash.stats->sample_blocks) = model_->SampleChunk();
    if (options_.counted) {
      auto counted = options_.counted(a.micro_batch);
      if (!counted.ok()) return counted.status();
      stash.stats->counted = counted->to(at::kDouble);
    }
    model_->set_router_stats(stash.stats);
  }
  if (chunk.embedding && chunk.head) {
    // The whole model in one chunk (a one-stage pipeline: no pipeline parallelism). Decoder::Loss,
    // which also leaves out the positions no trained target reads. Its rows may be wider than
    // seq_len (DPO's shared-prompt rows: a prompt and two completions): inputs and targets are the
    // row's entries but the last and but the first.
    const int64_t width = tokens.size(1) - 1;
    stash.output = model_->Loss(tokens.narrow(1, 0, width), tokens.narrow(1, 1, width));
    if (stash.stats) {
      model_->set_router_stats({});
      if (absl::Status s = ForwardStats(a, stash); !s.ok()) return s;
    }
    *loss_sum += stash.output.item<double>();
    if (!keep) return absl::OkStatus();
    stash_[{a.micro_batch, a.chunk}] = std::move(stash);
    peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
    return absl::OkStatus();
  }
  at::Tensor x;
  if (chunk.embedding) {
    x = model_->Embed(tokens.narrow(1, 0, T));
  } else {
    stash.input = EmptyActivation();
    absl::Status s = RecvFrom(stash.input, Kind::kActivation, a.micro_batch, chunk.virtual_stage, chunk.virtual_stage - 1);
    if (!s.ok()) return s;
    if (keep) stash.input.requires_grad_(true);
    x = stash.input;
  }
  x = model_->Blocks(x, chunk.first_layer, chunk.num_layers);
  if (stash.stats) {
    model_->set_router_stats({});
    if (absl::Status s = ForwardStats(a, stash); !s.ok()) return s;
  }
  if (chunk.head) {
    stash.output = model_->Head(x, tokens.narrow(1, 1, T));
    *loss_sum += stash.output.item<double>();
  } else {
    stash.output = x;
    SendTo(x.detach().contiguous(), Kind::kActivation, a.micro_batch, chunk.virtual_stage + 1);
  }
  if (!keep) return absl::OkStatus();
  stash_[{a.micro_batch, a.chunk}] = std::move(stash);
  peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
  return absl::OkStatus();
}

absl::Status PipelineRunner::Backward(const PipeAction& a, double loss_weight) {
  const ModelChunk& chunk = chunks_[a.chunk];
  auto it = stash_.find({a.micro_batch, a.chunk});
  if (it == stash_.end()) {
    return absl::InternalError(absl::StrCat("pipeline schedule: backward of micro-batch ", a.micro_batch,
                                            " chunk ", a.chunk, " before its forward"));
  }
  Stash stash = std::move(it->second);
  stash_.erase(it);
  --in_flight_;
  bool send_totals = false;
  at::Tensor totals;
  model_->set_positions(stash.positions);  // For blocks recomputed inside this backward.
  model_->set_dropout_seed(stash.dropout_seed);
  if (stash.stats) {
    if (absl::Status s = BackwardStats(a, stash, loss_weight, &send_totals, &totals); !s.ok()) return s;
  }
  std::vector<at::Tensor> outputs, grads;
  if (chunk.head) {
    // As the unpipelined loop (Trainer::ForwardBackward): the loss times its weight in the step.
    outputs = {stash.output * loss_weight};
  } else {
    at::Tensor grad = EmptyActivation();
    absl::Status s = RecvFrom(grad, Kind::kGradient, a.micro_batch, chunk.virtual_stage, chunk.virtual_stage + 1);
    if (!s.ok()) return s;
    outputs = {stash.output};
    grads = {grad};
  }
  at::Tensor input_grad;
  if (split_) {
    // B: the input's gradient now, the parameters' in this micro-batch chunk's W (Weight).
    auto store = std::make_unique<WeightGradStore>();
    std::vector<at::Tensor> params;
    for (const Param& q : model_->params()) {
      if (q.value.requires_grad()) params.push_back(q.value);
    }
    store->set_params(std::move(params));
    input_grad = SplitBackward(outputs, grads, stash.input, store.get());
    const int64_t held = store->held_bytes();
    store_bytes_[{a.micro_batch, a.chunk}] = held;
    pending_bytes_ += held;
    pending_peak_bytes_ = std::max(pending_peak_bytes_, pending_bytes_);
    stores_[{a.micro_batch, a.chunk}] = std::move(store);
  } else {
    torch::autograd::backward(outputs, grads);
    if (stash.input.defined()) input_grad = stash.input.grad();
  }
  if (!chunk.embedding) SendTo(input_grad.contiguous(), Kind::kGradient, a.micro_batch, chunk.virtual_stage - 1);
  if (send_totals) SendTo(totals, Kind::kStatsBackward, a.micro_batch, chunk.virtual_stage - 1);
  return absl::OkStatus();
}

absl::Status PipelineRunner::Weight(const std::vector<PipeAction>& together) {
  std::unique_ptr<WeightGradStore> store;
  for (const PipeAction& a : together) {
    auto it = stores_.find({a.micro_batch, a.chunk});
    if (it == stores_.end()) {
      return absl::InternalError(absl::StrCat("pipeline schedule: weight gradients of micro-batch ", a.micro_batch,
                                              " chunk ", a.chunk, " before its backward"));
    }
    if (store) {
      store->Absorb(*it->second);
    } else {
      store = std::move(it->second);
    }
    stores_.erase(it);
    pending_bytes_ -= store_bytes_[{a.micro_batch, a.chunk}];
    store_bytes_.erase({a.micro_batch, a.chunk});
  }
  if (store) store->Run();
  return absl::OkStatus();
}

absl::Status PipelineRunner::ForwardStats(const PipeAction& a, Stash& stash) {
  const ModelChunk& chunk = chunks_[a.chunk];
  const int64_t E = options_.experts;
  RouterStats& st = *stash.stats;
  const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble).device(model_->params().at(0).value.device());
  at::Tensor carried = at::zeros({2 * E + 1}, f64);
  if (!chunk.embedding) {
    absl::Status s = RecvFrom(carried, Kind::kStatsForward, a.micro_batch, chunk.virtual_stage, chunk.virtual_stage - 1);
    if (!s.ok()) return s;
  }
  if (st.rows > 0) {
    carried.narrow(0, 0, E).add_(st.counts);
    carried.narrow(0, E, E).add_(st.prob_sums);
    carried.narrow(0, 2 * E, 1).add_(static_cast<double>(st.rows));
  }
  // Load per sparse block, for the step's report.
  for (const auto& [layer, counts] : st.layer_counts) {
    if (!expert_load_.defined()) expert_load_ = at::zeros({model_->config().layers, E}, f64);
    expert_load_[layer].add_(counts);
  }
  if (chunk.head) {
    // The whole micro-batch's: over the grid's sample axes and the sequence blocks.
    std::vector<Communicator*> over = model_->SampleAxes();
    if (options_.sp && options_.sp->size() > 1) over.push_back(options_.sp.get());
    for (Communicator* g : over) {
      if (absl::Status s = g->AllReduce(carried, ReduceOp::kSum); !s.ok()) return s;
    }
    stash.totals = carried;
    RouterStats total(static_cast<int>(E));
    total.counts = carried.narrow(0, 0, E);
    total.prob_sums = carried.narrow(0, E, E);
    total.rows = static_cast<int64_t>(carried[2 * E].item<double>());
    aux_sum_ += total.AuxLoss();
  } else {
    SendTo(carried, Kind::kStatsForward, a.micro_batch, chunk.virtual_stage + 1);
  }
  return absl::OkStatus();
}

absl::Status PipelineRunner::BackwardStats(const PipeAction& a, Stash& stash, double loss_weight, bool* send_on,
                                           at::Tensor* totals) {
  const ModelChunk& chunk = chunks_[a.chunk];
  const int64_t E = options_.experts;
  at::Tensor t = stash.totals;
  if (!chunk.head) {
    t = at::empty({2 * E + 1}, at::TensorOptions().dtype(at::kDouble).device(model_->params().at(0).value.device()));
    absl::Status s = RecvFrom(t, Kind::kStatsBackward, a.micro_batch, chunk.virtual_stage, chunk.virtual_stage + 1);
    if (!s.ok()) return s;
  }
  // The blocks' gradients use the micro-batch's counts and rows over every stage.
  RouterStats& st = *stash.stats;
  st.counts = t.narrow(0, 0, E);
  st.rows = static_cast<int64_t>(t[2 * E].item<double>());
  // The balancing loss is over the whole sequence: each sp rank's gradient carries sp times its share
  // of loss_weight (which counts the sp ranks' micro-batches as the cross-entropy's blocks).
  const int sp = options_.sp ? options_.sp->size() : 1;
  st.grad_scale = options_.aux_loss_coef * loss_weight * sp;
  *send_on = !chunk.embedding;
  *totals = t;
  return absl::OkStatus();
}

}  // namespace tessera::parallel
