// The worker's Prometheus metrics, defined in this one place, labelled by job_id and rank only
// (not "job": Prometheus gives that label to the scrape job):
//   tessera_worker_step_duration_seconds      histogram  (rank 0: one observation per step)
//   tessera_worker_tokens_per_second          gauge      (rank 0, the job's global rate)
//   tessera_worker_samples_total              counter    (rank 0, global samples trained)
//   tessera_worker_loss                       gauge      (rank 0)
//   tessera_worker_val_loss                   gauge      (rank 0, the newest evaluation; from the first)
//   tessera_worker_learning_rate              gauge      (rank 0)
//   tessera_worker_grad_norm                  gauge      (rank 0)
//   tessera_worker_aux_loss                   gauge      (rank 0, Mixture of Experts)
//   tessera_worker_expert_imbalance_ratio     gauge      (rank 0, Mixture of Experts)
//   tessera_worker_checkpoint_blocked_seconds histogram  (rank 0, checkpoint.async: per checkpoint, the step held)
//   tessera_worker_checkpoint_write_seconds   histogram  (rank 0, checkpoint.async: per background write)
//   tessera_worker_mfu_ratio                  gauge      (rank 0: model FLOP/s ÷ (peak per device × ranks))
//   tessera_worker_bytes_all_reduced_total    counter    (rank 0)
//   tessera_worker_process_resident_memory_bytes gauge   (every rank)
//   tessera_worker_ranks                      gauge      (ranks running on this worker)
// A rank's series are removed when it exits.
#ifndef TESSERA_WORKER_WORKER_METRICS_H_
#define TESSERA_WORKER_WORKER_METRICS_H_

#include <map>
#include <string>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "worker/rank_supervisor.h"

namespace tessera::worker {

class WorkerMetrics {
 public:
  // `peak_flops_per_device`: the denominator of MFU for one device (0: MFU not reported).
  WorkerMetrics(prometheus::Registry& registry, double peak_flops_per_device);

  void OnEvent(const RankEvent& e);
  // Samples memory of every live rank (from /proc) and the rank count.
  void SampleProcesses(const std::vector<RankProcess>& processes);

 private:
  struct Series {
    prometheus::Histogram* step = nullptr;
    prometheus::Gauge* tokens_per_s = nullptr;
    prometheus::Counter* samples = nullptr;
    prometheus::Gauge* loss = nullptr;
    prometheus::Gauge* val_loss = nullptr;  // Added with the first evaluation.
    prometheus::Gauge* lr = nullptr;
    prometheus::Gauge* grad_norm = nullptr;
    prometheus::Gauge* aux_loss = nullptr;          // Added with the first step that reports one.
    prometheus::Gauge* expert_imbalance = nullptr;  // Likewise.
    prometheus::Histogram* checkpoint_blocked = nullptr;  // Added with the first asynchronous checkpoint.
    prometheus::Histogram* checkpoint_write = nullptr;    // Likewise.
    prometheus::Gauge* mfu = nullptr;
    prometheus::Counter* bytes = nullptr;
    prometheus::Gauge* memory = nullptr;
    int64_t last_step = 0;
  };
  Series& SeriesOf(const std::string& job, int rank);
  void Remove(const std::string& job, int rank);

  double peak_flops_per_device_;
  prometheus::Family<prometheus::Histogram>& step_;
  prometheus::Family<prometheus::Gauge>& tokens_per_s_;
  prometheus::Family<prometheus::Counter>& samples_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& val_loss_;
  prometheus::Family<prometheus::Gauge>& lr_;
  prometheus::Family<prometheus::Gauge>& grad_norm_;
  prometheus::Family<prometheus::Gauge>& aux_loss_;
  prometheus::Family<prometheus::Gauge>& expert_imbalance_;
  prometheus::Family<prometheus::Histogram>& checkpoint_blocked_;
  prometheus::Family<prometheus::Histogram>& checkpoint_write_;
  prometheus::Family<prometheus::Gauge>& mfu_;
  prometheus::Family<prometheus::Counter>& bytes_;
  prometheus::Family<prometheus::Gauge>& memory_;
  prometheus::Gauge& ranks_;
  std::map<std::pair<std::string, int>, Series> series_;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_WORKER_METRICS_H_
