#include "worker/worker_metrics.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/metrics/metrics_server.h"

namespace tessera::worker {
namespace {

template <typename Builder>
auto& Family(Builder builder, const char* name, const char* help, prometheus::Registry& r) {
  return builder.Name(name).Help(help).Register(r);
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& r, double peak)
    : peak_flops_per_device_(peak),
      step_(Family(prometheus::BuildHistogram(), "tessera_worker_step_duration_seconds",
                   "Duration of one optimizer step of the job (rank 0).", r)),
      tokens_per_s_(Family(prometheus::BuildGauge(), "tessera_worker_tokens_per_second",
                           "Tokens trained per second by the whole job (rank 0's last step).", r)),
      samples_(Family(prometheus::BuildCounter(), "tessera_worker_samples_total",
                      "Samples trained by the whole job, as reported by rank 0.", r)),
      loss_(Family(prometheus::BuildGauge(), "tessera_worker_loss", "Training loss of the last step.", r)),
      val_loss_(Family(prometheus::BuildGauge(), "tessera_worker_val_loss",
                       "Mean validation loss of the newest evaluation (train.eval_every).", r)),
      lr_(Family(prometheus::BuildGauge(), "tessera_worker_learning_rate", "Learning rate of the last step.", r)),
      grad_norm_(Family(prometheus::BuildGauge(), "tessera_worker_grad_norm",
                        "Global gradient L2 norm (before clipping) of the last step.", r)),
      aux_loss_(Family(prometheus::BuildGauge(), "tessera_worker_aux_loss",
                       "Mixture of Experts: the balancing loss (unscaled) of the last step.", r)),
      expert_imbalance_(Family(prometheus::BuildGauge(), "tessera_worker_expert_imbalance_ratio",
                               "Mixture of Experts: tokens of the busiest expert over the mean tokens per expert, "
                               "the largest over sparse blocks, of the last step (1: balanced).", r)),
      checkpoint_blocked_(Family(prometheus::BuildHistogram(), "tessera_worker_checkpoint_blocked_seconds",
                                 "checkpoint.async: how long each checkpoint held its step (the snapshot, and "
                                 "waiting for the previous background write).", r)),
      checkpoint_write_(Family(prometheus::BuildHistogram(), "tessera_worker_checkpoint_write_seconds",
                               "checkpoint.async: how long each background checkpoint write took (files, fsync, "
                               "the vote and the commit).", r)),
      mfu_(Family(prometheus::BuildGauge(), "tessera_worker_mfu_ratio",
                  "Model FLOPs utilisation: model FLOP/s over peak FLOP/s of the job's devices.", r)),
      bytes_(Family(prometheus::BuildCounter(), "tessera_worker_bytes_all_reduced_total",
                    "Bytes passed to all-reduce by rank 0.", r)),
      memory_(Family(prometheus::BuildGauge(), "tessera_worker_process_resident_memory_bytes",
                     "Resident memory of the rank process.", r)),
      ranks_(Family(prometheus::BuildGauge(), "tessera_worker_ranks", "Rank processes running on this worker.", r)
                 .Add({})) {}

WorkerMetrics::Series& WorkerMetrics::SeriesOf(const std::string& job, int rank) {
  auto [it, inserted] = series_.try_emplace({job, rank});
  Series& s = it->second;
  if (inserted) {
    const prometheus::Labels labels = {{"job_id", job}, {"rank", absl::StrCat(rank)}};
    s.memory = &memory_.Add(labels);
    if (rank == 0) {
      s.step = &step_.Add(labels, metrics::ExponentialBuckets(0.001, 2, 16));
      s.tokens_per_s = &tokens_per_s_.Add(labels);
      s.samples = &samples_.Add(labels);
      s.loss = &loss_.Add(labels);
      s.lr = &lr_.Add(labels);
      s.grad_norm = &grad_norm_.Add(labels);
      s.mfu = &mfu_.Add(labels);
      s.bytes = &bytes_.Add(labels);
    }
  }
  return s;
}

void WorkerMetrics::Remove(const std::string& job, int rank) {
  auto it = series_.find({job, rank});
  if (it == series_.end()) return;
  Series& s = it->second;
  memory_.Remove(s.memory);
  if (s.step != nullptr) {
    step_.Remove(s.step);
    tokens_per_s_.Remove(s.tokens_per_s);
    samples_.Remove(s.samples);
    loss_.Remove(s.loss);
    if (s.val_loss != nullptr) val_loss_.Remove(s.val_loss);
    lr_.Remove(s.lr);
    grad_norm_.Remove(s.grad_norm);
    if (s.aux_loss != nullptr) aux_loss_.Remove(s.aux_loss);
    if (s.expert_imbalance != nullptr) expert_imbalance_.Remove(s.expert_imbalance);
    if (s.checkpoint_blocked != nullptr) checkpoint_blocked_.Remove(s.checkpoint_blocked);
    if (s.checkpoint_write != nullptr) checkpoint_write_.Remove(s.checkpoint_write);
    mfu_.Remove(s.mfu);
    bytes_.Remove(s.bytes);
  }
  series_.erase(it);
}

void WorkerMetrics::OnEvent(const RankEvent& e) {
  if (e.event == v1::ReportRankStatusRequest::EVENT_EXITED) {
    Remove(e.job_id, e.rank);
    return;
  }
  if (e.event != v1::ReportRankStatusRequest::EVENT_PROGRESS || e.rank != 0) return;
  Series& s = SeriesOf(e.job_id, e.rank);
  const auto& p = e.progress;
  if (p.step() <= s.last_step) return;  // Already counted (or the step log restarted).
  const int64_t steps = s.last_step > 0 ? p.step() - s.last_step : 1;
  s.last_step = p.step();
  s.step->Observe(p.step_seconds());
  s.tokens_per_s->Set(p.tokens_per_s());
  s.samples->Increment(static_cast<double>(steps * e.samples));
  s.loss->Set(p.loss());
  if (p.val_step() > 0) {
    if (s.val_loss == nullptr) s.val_loss = &val_loss_.Add({{"job_id", e.job_id}, {"rank", absl::StrCat(e.rank)}});
    s.val_loss->Set(p.val_loss());
  }
  s.lr->Set(p.lr());
  s.grad_norm->Set(p.grad_norm());
  const prometheus::Labels labels = {{"job_id", e.job_id}, {"rank", absl::StrCat(e.rank)}};
  if (p.has_aux_loss()) {
    if (s.aux_loss == nullptr) s.aux_loss = &aux_loss_.Add(labels);
    s.aux_loss->Set(p.aux_loss());
  }
  if (p.has_expert_imbalance()) {
    if (s.expert_imbalance == nullptr) s.expert_imbalance = &expert_imbalance_.Add(labels);
    s.expert_imbalance->Set(p.expert_imbalance());
  }
  if (p.has_checkpoint_blocked_s()) {
    if (s.checkpoint_blocked == nullptr) {
      s.checkpoint_blocked = &checkpoint_blocked_.Add(labels, metrics::ExponentialBuckets(0.001, 2, 18));
    }
    s.checkpoint_blocked->Observe(p.checkpoint_blocked_s());
  }
  if (p.has_checkpoint_write_s()) {
    if (s.checkpoint_write == nullptr) {
      s.checkpoint_write = &checkpoint_write_.Add(labels, metrics::ExponentialBuckets(0.001, 2, 18));
    }
    s.checkpoint_write->Observe(p.checkpoint_write_s());
  }
  s.bytes->Increment(static_cast<double>(e.bytes_all_reduced) * steps);
  if (peak_flops_per_device_ > 0) {
    s.mfu->Set(p.tokens_per_s() * e.flops_per_token / (peak_flops_per_device_ * e.world_size));
  }
}

void WorkerMetrics::SampleProcesses(const std::vector<RankProcess>& processes) {
  ranks_.Set(static_cast<double>(processes.size()));
  const long page = sysconf(_SC_PAGESIZE);
  for (const RankProcess& p : processes) {
    std::ifstream statm(absl::StrCat("/proc/", p.pid, "/statm"));
    long size = 0, resident = 0;
    if (statm >> size >> resident) SeriesOf(p.job_id, p.rank).memory->Set(static_cast<double>(resident) * page);
  }
}

}  // namespace tessera::worker
