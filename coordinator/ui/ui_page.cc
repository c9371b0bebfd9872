#include "coordinator/ui/ui_page.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/job_spec.h"
#include "spec/model_config_of.h"
#include "coordinator/ui/html.h"
#include "coordinator/ui/svg_chart.h"

namespace tessera::coordinator::ui {
namespace {

constexpr char kStyle[] = R"(<style>
body{font:14px/1.4 "DejaVu Sans",sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:10px 20px;display:flex;gap:20px;align-items:baseline}
header a{color:#fff;text-decoration:none;font-weight:bold;font-size:18px}header .who{margin-left:auto;color:#c8cdd8}
main{padding:12px 20px}h2{font-size:16px;margin:18px 0 8px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002}
th,td{padding:4px 10px;border-bottom:1px solid #e3e6eb;text-align:left;white-space:nowrap}
th{background:#eceff3;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.reason{white-space:normal;overflow-wrap:anywhere;word-break:break-word;min-width:240px;max-width:420px;color:#555}
.state{font-weight:600}.RUNNING,.ALIVE,.SUCCEEDED{color:#1a7f37}.FAILED,.LOST{color:#c62828}
.PENDING,.SCHEDULED,.RESTARTING{color:#9a6700}.CANCELLED{color:#666}
.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fff;box-shadow:0 1px 2px #0002}svg .plot{fill:none;stroke:#d0d5dd}
svg .grid{stroke:#eceff3}svg .tick,svg .axis,svg .legend,svg .empty{font-size:10px;fill:#555}
svg .chart-title{font-size:12px;font-weight:600;fill:#1d2330}svg .line{stroke-width:1.5}
pre.log{background:#11151c;color:#d6dae2;padding:8px;max-height:260px;overflow:auto;font-size:12px;margin:4px 0 12px}
.note{color:#666}
</style>)";

std::string StateName(v1::JobState s) {
  std::string n = v1::JobState_Name(s);
  return n.rfind("JOB_STATE_", 0) == 0 ? n.substr(10) : n;
}

std::string WorkerStateName(v1::Worker::State s) {
  std::string n = v1::Worker::State_Name(s);
  return n.rfind("STATE_", 0) == 0 ? n.substr(6) : n;
}

std::string KindName(v1::DeviceKind k) {
  return k == v1::DEVICE_KIND_CUDA ? "cuda" : k == v1::DEVICE_KIND_CPU ? "cpu" : "unknown";
}

std::string Head(const Viewer& viewer, const std::string& title, const PageOptions& o) {
  std::string who = !viewer.tls ? "no TLS: callers are not authenticated"
                                : absl::StrCat("signed in as ", Escape(viewer.user), viewer.admin ? " (admin)" : "");
  return absl::StrCat("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
                      o.refresh_s > 0 ? absl::StrCat("<meta http-equiv=\"refresh\" content=\"", o.refresh_s, "\">") : "",
                      "<title>", Escape(title), " · tessera</title>", kStyle,
                      "</head><body><header><a href=\"/ui\">tessera</a><span>", Escape(title),
                      "</span><span class=\"who\">", who, "</span></header><main>");
}

constexpr char kFoot[] = "</main></body></html>";

std::string Ago(int64_t then_ms, int64_t now_ms) {
  return then_ms <= 0 ? "\xE2\x80\x93" : absl::StrCat(Duration(now_ms - then_ms), " ago");
}

std::string Rank0Worker(const v1::Job& job) {
  for (const auto& p : job.placement()) {
    if (p.rank() == 0) return p.worker_id();
  }
  if (job.history_size() > 0 && job.history(job.history_size() - 1).workers_size() > 0) {
    return job.history(job.history_size() - 1).workers(0);
  }
  return "";
}

std::string Cell(const std::string& text, const char* cls = nullptr) {
  return cls == nullptr ? absl::StrCat("<td>", text, "</td>") : absl::StrCat("<td class=\"", cls, "\">", text, "</td>");
}

std::string JobLink(const v1::Job& job) {
  return absl::StrCat("<a href=\"/ui/jobs/", Escape(job.id()), "\">", Escape(job.id()), "</a>");
}

}  // namespace

double JobMfu(const v1::Job& job, double tokens_per_s, const PeakByWorker& peaks) {
  auto it = peaks.find(Rank0Worker(job));
  const int64_t world = spec::WorldSize(job.spec());
  if (it == peaks.end() || !(it->second > 0) || world <= 0 || !(tokens_per_s > 0)) return 0;
  const double flops_per_token = spec::ModelConfigOf(job.spec().model()).TrainingFlopsPerToken();
  return tokens_per_s * flops_per_token / (it->second * static_cast<double>(world));
}

std::string RenderOverview(const Viewer& viewer, const std::vector<v1::Worker>& workers,
                           const std::vector<v1::Job>& jobs, const PageOptions& o) {
  std::string out = Head(viewer, "cluster", o);
  PeakByWorker peaks;
  int64_t devices = 0, used = 0;
  for (const auto& w : workers) {
    peaks[w.name()] = w.peak_flops_per_device();
    if (w.state() == v1::Worker::STATE_ALIVE) devices += w.device_count(), used += w.devices_in_use();
  }
  absl::StrAppend(&out, "<h2>Workers</h2><p class=\"note\" id=\"device-summary\">", workers.size(), " workers, ", used,
                  " of ", devices, " devices of live workers in use</p>");
  absl::StrAppend(&out, "<table id=\"workers\"><thead><tr><th>worker</th><th>pool</th><th>state</th><th>host</th><th>devices</th>"
                        "<th>in use</th><th>device memory</th><th>peak TFLOP/s per device</th><th>last heartbeat</th>"
                        "<th>metrics</th></tr></thead><tbody>");
  for (const auto& w : workers) {
    const std::string state = WorkerStateName(w.state());
    absl::StrAppend(&out, "<tr data-worker=\"", Escape(w.name()), "\">", Cell(Escape(w.name())),
                    Cell(Escape(w.pool().empty() ? "default" : w.pool())),
                    absl::StrCat("<td class=\"state ", state, "\">", state, "</td>"), Cell(Escape(w.host())),
                    Cell(absl::StrCat(w.device_count(), " ", KindName(w.device_kind())), "num"),
                    Cell(absl::StrCat(w.devices_in_use()), "num"),
                    Cell(w.device_memory_bytes() > 0 ? absl::StrFormat("%.1f GiB", w.device_memory_bytes() / 1073741824.0)
                                                     : "\xE2\x80\x93", "num"),
                    Cell(w.peak_flops_per_device() > 0 ? Number(w.peak_flops_per_device() / 1e12, 4) : "\xE2\x80\x93", "num"),
                    Cell(Ago(w.last_heartbeat_unix_ms(), o.now_ms)), Cell(Escape(w.metrics_address())), "</tr>");
  }
  absl::StrAppend(&out, "</tbody></table>");
  absl::StrAppend(&out, "<h2>Jobs</h2><table id=\"jobs\"><thead><tr><th>job</th><th>name</th>",
                  viewer.tls ? "<th>owner</th>" : "",
                  "<th>state</th><th>attempt</th><th>restarts</th><th>step</th><th>loss</th><th>val_loss</th>"
                  "<th>tokens/s</th><th>MFU</th><th>checkpoint</th><th>submitted</th><th>reason</th></tr></thead><tbody>");
  for (const auto& j : jobs) {
    const std::string state = StateName(j.state());
    const v1::JobProgress& p = j.progress();
    const double mfu = JobMfu(j, p.tokens_per_s(), peaks);
    absl::StrAppend(&out, "<tr data-job=\"", Escape(j.id()), "\" data-state=\"", state, "\">", Cell(JobLink(j)),
                    Cell(Escape(j.spec().name())), viewer.tls ? Cell(Escape(j.owner())) : "",
                    absl::StrCat("<td class=\"state ", state, "\">", state, "</td>"), Cell(absl::StrCat(j.attempt()), "num"),
                    Cell(absl::StrCat(j.restarts_used(), " / ", j.max_restarts()), "num"),
                    Cell(absl::StrCat(p.step(), " / ", p.total_steps()), "num"),
                    Cell(p.step() > 0 ? Number(p.loss()) : "\xE2\x80\x93", "num"),
                    Cell(p.val_step() > 0 ? Number(p.val_loss()) : "\xE2\x80\x93", "num"),
                    Cell(p.tokens_per_s() > 0 ? absl::StrFormat("%.0f", p.tokens_per_s()) : "\xE2\x80\x93", "num"),
                    Cell(mfu > 0 ? absl::StrFormat("%.1f%%", mfu * 100) : "\xE2\x80\x93", "num"),
                    Cell(p.last_checkpoint_step() > 0 ? absl::StrCat(p.last_checkpoint_step()) : "\xE2\x80\x93", "num"),
                    Cell(Ago(j.created_unix_ms(), o.now_ms)), Cell(Escape(j.reason()), "reason"), "</tr>");
  }
  if (jobs.empty()) {
    absl::StrAppend(&out, "<tr><td colspan=\"14\" class=\"note\">no jobs", viewer.tls && !viewer.admin ? " of yours" : "",
                    "</td></tr>");
  }
  absl::StrAppend(&out, "</tbody></table>", kFoot);
  return out;
}

std::string RenderJobPage(const Viewer& viewer, const JobPageData& d, const PageOptions& o) {
  const v1::Job& j = d.job;
  const std::string state = StateName(j.state());
  std::string out = Head(viewer, absl::StrCat("job ", j.id()), o);
  const v1::JobSpec& s = j.spec();
  absl::StrAppend(&out, "<h2>", Escape(s.name()), " <span class=\"state ", state, "\" id=\"job-state\">", state,
                  "</span></h2><p id=\"job-summary\">", Escape(j.id()),
                  viewer.tls ? absl::StrCat(" · owner ", Escape(j.owner())) : "", " · attempt ", j.attempt(),
                  " · restarts ", j.restarts_used(), " / ", j.max_restarts(), " · step ", j.progress().step(), " / ",
                  j.progress().total_steps(), " · ", spec::WorldSize(s), " ranks (dp ", std::max(1, s.parallel().dp()),
                  ", tp ", std::max(1, s.parallel().tp()), ", pp ", std::max(1, s.parallel().pp()), ", sp ",
                  std::max(1, s.parallel().sp()), ") · output ", Escape(s.output_dir()), "</p>");
  if (!j.reason().empty()) absl::StrAppend(&out, "<p class=\"note\" id=\"job-reason\">", Escape(j.reason()), "</p>");
  // How the coordinator placed the ranks (coordinator/placement.h): tp groups, sp and pp neighbours.
  if (!j.placement_explanation().empty()) {
    absl::StrAppend(&out, "<p class=\"note\" id=\"job-placement\">placement: ", Escape(j.placement_explanation()),
                    "</p>");
  }

  // Charts: one point per step of the step log.
  ChartSeries loss{"loss", "#1f77b4", {}}, val{"val_loss", "#d62728", {}}, tps{"tokens/s", "#2ca02c", {}},
      mfu{"MFU %", "#9467bd", {}}, step_time{"step time (s)", "#ff7f0e", {}}, lm{"lm_loss", "#17becf", {}},
      aux{"aux_loss", "#8c564b", {}}, imbalance{"busiest expert / mean", "#e377c2", {}};
  // GRPO (steps.jsonl's grpo_metrics): the mean reward and the completions' lengths.
  ChartSeries reward{"reward", "#2ca02c", {}}, length{"completion_length", "#1f77b4", {}},
      longest{"completion_length_max", "#ff7f0e", {}};
  for (const auto& [step, r] : d.history.steps) {
    const double x = static_cast<double>(step);
    loss.points.push_back({x, r.loss});
    for (const auto& [name, value] : r.grpo_metrics) {
      if (!std::isfinite(value)) continue;
      if (name == "reward") reward.points.push_back({x, value});
      if (name == "completion_length") length.points.push_back({x, value});
      if (name == "completion_length_max") longest.points.push_back({x, value});
    }
    if (r.lm_loss) lm.points.push_back({x, *r.lm_loss});
    if (r.aux_loss) aux.points.push_back({x, *r.aux_loss});
    if (r.expert_imbalance) imbalance.points.push_back({x, *r.expert_imbalance});
    tps.points.push_back({x, r.tokens_per_s});
    step_time.points.push_back({x, r.step_seconds});
    const double m = JobMfu(j, r.tokens_per_s, d.peaks);
    if (m > 0) mfu.points.push_back({x, m * 100});
  }
  for (const auto& [step, v] : d.history.val_loss) val.points.push_back({static_cast<double>(step), v});
  absl::StrAppend(&out, "<h2>Training</h2>");
  if (!d.history_error.empty()) {
    absl::StrAppend(&out, "<p class=\"note\" id=\"history-error\">", Escape(d.history_error), "</p>");
  } else if (d.history.bytes_skipped > 0) {
    absl::StrAppend(&out, "<p class=\"note\">the step log's first ", d.history.bytes_skipped,
                    " bytes are not drawn (only its newest part is read)</p>");
  }
  ChartOptions c;
  c.id = "loss", c.title = "loss and val_loss";
  std::vector<ChartSeries> losses = {loss, val};
  if (!lm.points.empty()) losses.push_back(lm);  // A Mixture of Experts: the cross-entropy apart.
  absl::StrAppend(&out, "<div class=\"charts\">", RenderLineChart(c, losses));
  if (!reward.points.empty()) {
    c.id = "reward", c.title = "mean reward (GRPO)";
    absl::StrAppend(&out, RenderLineChart(c, {reward}));
    c.id = "completion_length", c.title = "completion length (tokens)";
    absl::StrAppend(&out, RenderLineChart(c, {length, longest}));
  }
  if (!aux.points.empty()) {
    c.id = "aux_loss", c.title = "balancing loss (aux_loss)";
    absl::StrAppend(&out, RenderLineChart(c, {aux}));
  }
  if (!imbalance.points.empty()) {
    c.id = "expert_imbalance", c.title = "expert load: busiest expert / mean (1: balanced)";
    absl::StrAppend(&out, RenderLineChart(c, {imbalance}));
  }
  c.id = "tokens_per_s", c.title = "tokens/s", c.y_from_zero = true;
  absl::StrAppend(&out, RenderLineChart(c, {tps}));
  c.id = "mfu", c.title = "MFU (%)";
  absl::StrAppend(&out, RenderLineChart(c, {mfu}));
  c.id = "step_seconds", c.title = "step time (s)";
  absl::StrAppend(&out, RenderLineChart(c, {step_time}), "</div>");

  absl::StrAppend(&out, "<h2>Attempts</h2><table id=\"attempts\"><thead><tr><th>attempt</th><th>outcome</th>"
                        "<th>started</th><th>ran</th><th>resumed from</th><th>last step</th><th>recomputed</th>"
                        "<th>workers</th><th>reason</th></tr></thead><tbody>");
  for (auto a = j.history().rbegin(); a != j.history().rend(); ++a) {
    const std::string outcome = a->outcome() == v1::JOB_STATE_UNSPECIFIED ? "RUNNING" : StateName(a->outcome());
    const int64_t end = a->ended_unix_ms() > 0 ? a->ended_unix_ms() : o.now_ms;
    std::string workers;
    for (int i = 0; i < a->workers_size(); ++i) absl::StrAppend(&workers, i ? ", " : "", Escape(a->workers(i)));
    absl::StrAppend(&out, "<tr data-attempt=\"", a->attempt(), "\">", Cell(absl::StrCat(a->attempt()), "num"),
                    absl::StrCat("<td class=\"state ", outcome, "\">", outcome, "</td>"),
                    Cell(Ago(a->started_unix_ms(), o.now_ms)), Cell(Duration(end - a->started_unix_ms()), "num"),
                    Cell(absl::StrCat(a->resumed_from_step()), "num"), Cell(absl::StrCat(a->last_step()), "num"),
                    Cell(absl::StrCat(a->recomputed_steps()), "num"), Cell(workers),
                    Cell(Escape(a->failed_worker().empty() ? a->reason()
                                                           : absl::StrCat(a->reason(), " (worker ", a->failed_worker(), ")")),
                         "reason"),
                    "</tr>");
  }
  absl::StrAppend(&out, "</tbody></table>");

  absl::StrAppend(&out, "<h2>Logs</h2>");
  if (!d.logs_error.empty()) absl::StrAppend(&out, "<p class=\"note\">", Escape(d.logs_error), "</p>");
  for (const auto& [rank, text] : d.log_tails) {
    absl::StrAppend(&out, "<h3>rank ", rank, "</h3><pre class=\"log\" data-rank=\"", rank, "\">", Escape(text), "</pre>");
  }
  if (d.ranks_not_shown > 0) {
    absl::StrAppend(&out, "<p class=\"note\">", d.ranks_not_shown, " more ranks: tessera logs ", Escape(j.id()),
                    " --rank N</p>");
  }
  absl::StrAppend(&out, kFoot);
  return out;
}

std::string RenderMessage(const Viewer& viewer, const std::string& title, const std::string& message) {
  PageOptions o;
  o.refresh_s = 0;
  return absl::StrCat(Head(viewer, title, o), "<p id=\"message\">", Escape(message), "</p><p><a href=\"/ui\">cluster</a></p>",
                      kFoot);
}

}  // namespace tessera::coordinator::ui
