// The dashboard's pages as HTML, from the coordinator's state: no I/O here (ui_server.h gathers the
// data and serves them). Every page is one self-contained document — inline CSS and SVG charts, no
// script, nothing fetched from elsewhere — that reloads itself every `refresh_s` seconds.
#ifndef TESSERA_COORDINATOR_UI_UI_PAGE_H_
#define TESSERA_COORDINATOR_UI_UI_PAGE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/ui/step_history.h"
#include "tessera/v1/cluster.pb.h"

namespace tessera::coordinator::ui {

// Who looks: shown in the header ("alice", "alice (admin)", or "no TLS: not authenticated").
struct Viewer {
  bool tls = false;
  std::string user;
  bool admin = false;
};

struct PageOptions {
  int refresh_s = 5;     // 0: the page does not reload itself.
  int64_t now_ms = 0;    // The time ages are measured to (Unix ms).
};

// Peak FLOP/s of one device, by worker name (from its registration; absent or 0: unknown).
using PeakByWorker = std::map<std::string, double>;

// MFU of a job reporting `tokens_per_s`: model FLOP/s ÷ (peak of rank 0's worker × ranks); 0 when
// the peak or the world is unknown.
double JobMfu(const v1::Job& job, double tokens_per_s, const PeakByWorker& peaks);

// /ui: the workers and their devices; the jobs the viewer may see (newest first) with state,
// attempts, progress and the newest loss, val_loss, tokens/s and MFU.
std::string RenderOverview(const Viewer& viewer, const std::vector<v1::Worker>& workers,
                           const std::vector<v1::Job>& jobs, const PageOptions& options);

struct JobPageData {
  v1::Job job;
  StepHistory history;       // Rank 0's step log.
  std::string history_error; // Why there is none (not readable by the coordinator), else empty.
  PeakByWorker peaks;
  std::vector<std::pair<int, std::string>> log_tails;  // (rank, the tail of its log).
  std::string logs_error;    // Why the logs are not shown, else empty.
  int64_t ranks_not_shown = 0;
};

// /ui/jobs/ID: the job's state, its attempts, charts of loss and val_loss, tokens/s, MFU and step
// time by step (one point per step of the step log), and the tail of each rank's log.
std::string RenderJobPage(const Viewer& viewer, const JobPageData& data, const PageOptions& options);

// A page with a status line only ("404 job j-9 does not exist").
std::string RenderMessage(const Viewer& viewer, const std::string& title, const std::string& message);

}  // namespace tessera::coordinator::ui

#endif  // TESSERA_COORDINATOR_UI_UI_PAGE_H_
