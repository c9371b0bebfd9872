#include "coordinator/store_writer.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::coordinator {

StoreWriter::StoreWriter(StoreWriterOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

StoreWriter::~StoreWriter() { Stop(); }

void StoreWriter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

uint64_t StoreWriter::Put(const v1::Job& job) {
  auto row = JobStore::RowOf(job);
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = ++last_ticket_;
  if (!row.ok()) {
    // Cannot happen for a message built in memory; reported like a failed batch.
    fprintf(stderr, "tessera-coordinator: %s\n", row.status().ToString().c_str());
    return ticket;
  }
  queued_[job.id()] = Queued{std::move(*row), ticket};
  work_.Signal();
  return ticket;
}

uint64_t StoreWriter::last_ticket() const {
  absl::MutexLock lock(&mu_);
  return last_ticket_;
}

int64_t StoreWriter::commits() const {
  absl::MutexLock lock(&mu_);
  return commits_;
}

int64_t StoreWriter::failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

absl::Status StoreWriter::Wait(uint64_t ticket, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (true) {
    if (announced_ >= ticket) return absl::OkStatus();
    // Batches run in ticket order and each takes every row queued: a batch that covered `ticket`
    // without making it durable failed.
    if (attempted_ >= ticket && durable() < ticket) return last_error_;
    if (done_.WaitWithDeadline(&mu_, deadline)) {
      if (announced_ >= ticket) return absl::OkStatus();
      return absl::DeadlineExceededError(
          absl::StrCat("the job database did not complete a write within ", absl::FormatDuration(timeout)));
    }
  }
}

void StoreWriter::Run() {
  bool last_failed = false;
  int failed_while_stopping = 0;
  while (true) {
    std::map<std::string, Queued> batch;
    uint64_t up_to = 0;
    {
      absl::MutexLock lock(&mu_);
      // After a failure, wait before trying again (unless stopping: then one more try at once).
      if (last_failed && !stopping_) work_.WaitWithTimeout(&mu_, options_.retry_after);
      while (queued_.empty() && !stopping_) work_.Wait(&mu_);
      if (queued_.empty()) return;  // Stopping, nothing left.
      if (stopping_ && last_failed && ++failed_while_stopping > 1) {
        fprintf(stderr, "tessera-coordinator: stopping with %zu job row(s) not stored: %s\n", queued_.size(),
                last_error_.ToString().c_str());
        return;
      }
      batch.swap(queued_);
      up_to = last_ticket_;
    }
    std::vector<JobStore::Row> rows;
    rows.reserve(batch.size());
    for (auto& [id, q] : batch) rows.push_back(std::move(q.row));
    const absl::Status s = options_.store->PutAll(rows);
    {
      absl::MutexLock lock(&mu_);
      attempted_ = up_to;
      if (s.ok()) {
        ++commits_;
        durable_.store(up_to, std::memory_order_release);
      } else {
        ++failures_;
        last_error_ = absl::Status(s.code(), absl::StrCat("storing ", batch.begin()->first,
                                                          batch.size() > 1 ? absl::StrCat(" and ", batch.size() - 1, " more job(s)") : "",
                                                          ": ", s.message()));
        // Tried again, unless a newer row of the same job was queued meanwhile.
        size_t i = 0;
        for (auto& [id, q] : batch) {
          q.row = std::move(rows[i++]);
          queued_.emplace(id, std::move(q));
        }
      }
      done_.SignalAll();
    }
    last_failed = !s.ok();
    if (last_failed) {
      fprintf(stderr, "tessera-coordinator: storing %zu job row(s) failed: %s; trying again in %s\n", rows.size(),
              s.ToString().c_str(), absl::FormatDuration(options_.retry_after).c_str());
    } else {
      if (options_.on_durable) options_.on_durable();
      absl::MutexLock lock(&mu_);
      announced_ = up_to;
      done_.SignalAll();
    }
  }
}

}  // namespace tessera::coordinator
