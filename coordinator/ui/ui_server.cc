#include "coordinator/ui/ui_server.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spec/job_spec.h"
#include "common/tls/certificates.h"

namespace tessera::coordinator::ui {
namespace {

// Every page is self-contained: the browser is told to load nothing else and run no script.
const std::vector<std::pair<std::string, std::string>>& SecurityHeaders() {
  static const auto* headers = new std::vector<std::pair<std::string, std::string>>{
      {"Cache-Control", "no-store"},
      {"X-Content-Type-Options", "nosniff"},
      {"X-Frame-Options", "DENY"},
      {"Referrer-Policy", "no-referrer"},
      {"Content-Security-Policy",
       "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; frame-ancestors 'none'"},
  };
  return *headers;
}

http::Response Page(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.headers = SecurityHeaders();
  r.body = std::move(body);
  return r;
}

// The identity in the client's verified certificate (the TLS handshake checked it against the CA).
absl::StatusOr<tls::Identity> ClientIdentity(const http::Request& req) {
  if (req.client_certificate_pem.empty()) {
    return absl::UnauthenticatedError(
        "the browser presented no certificate: import your tessera user certificate (docs/dashboard.md)");
  }
  auto id = tls::IdentityOfCertificate(req.client_certificate_pem);
  if (!id.ok()) return absl::UnauthenticatedError(absl::StrCat("the browser's certificate: ", id.status().message()));
  return id;
}

// A job id as the coordinator makes them (at most 128 bytes): anything else is not looked up.
bool PlausibleJobId(std::string_view id) {
  return !id.empty() && id.size() <= 128 && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<UiServer>> UiServer::Start(const UiServerOptions& options, Coordinator* coordinator,
                                                          const Authorizer* authorizer) {
  std::unique_ptr<UiServer> s(new UiServer(options, coordinator, authorizer));
  http::ServerOptions server;
  server.listen = options.listen;
  server.tls = options.tls;
  server.threads = options.threads;
  auto started = http::Server::Start(server, [p = s.get()](const http::Request& r) { return p->Handle(r); });
  if (!started.ok()) return started.status();
  s->server_ = std::move(*started);
  return s;
}

std::string UiServer::url() const { return absl::StrCat(options_.tls ? "https://" : "http://", address(), "/ui"); }

http::Response UiServer::Handle(const http::Request& req) {
  Viewer viewer;
  viewer.tls = options_.tls.has_value();
  Caller caller;
  grpc::Status auth = authorizer_->User(viewer.tls ? ClientIdentity(req) : absl::StatusOr<tls::Identity>(tls::Identity{}),
                                        req.remote, "ui", &caller);
  if (!auth.ok()) {
    const bool unauthenticated = auth.error_code() == grpc::StatusCode::UNAUTHENTICATED;
    const int code = unauthenticated ? 401 : 403;
    return Page(code, RenderMessage(viewer, absl::StrCat(code), auth.error_message()));
  }
  viewer.user = caller.user;
  viewer.admin = caller.admin && viewer.tls;
  PageOptions page;
  page.refresh_s = options_.refresh_s;
  page.now_ms = absl::ToUnixMillis(absl::Now());
  if (req.path == "/" || req.path == "/ui/") {
    http::Response r = Page(302, "");
    r.headers.push_back({"Location", "/ui"});
    return r;
  }
  if (req.path == "/ui") {
    std::string next;
    std::vector<v1::Job> jobs = coordinator_->ListJobsPage(200, "", &next, caller.admin ? nullptr : &caller.user);
    return Page(200, RenderOverview(viewer, coordinator_->ListWorkers(), jobs, page));
  }
  constexpr std::string_view kJobs = "/ui/jobs/";
  if (req.path.rfind(kJobs, 0) == 0 && PlausibleJobId(std::string_view(req.path).substr(kJobs.size()))) {
    return JobPage(req.path.substr(kJobs.size()), caller, viewer, page);
  }
  return Page(404, RenderMessage(viewer, "404", absl::StrCat(req.path.substr(0, 200), ": no such page")));
}

http::Response UiServer::JobPage(const std::string& id, const Caller& caller, const Viewer& viewer,
                                 const PageOptions& page) {
  auto job = coordinator_->GetJob(id);
  if (!job.ok() || !authorizer_->Job(caller, *job, "ui").ok()) {
    // Another user's job reads as absent, as far as this page tells.
    return Page(404, RenderMessage(viewer, "404",
                                   absl::StrCat("job ", id, " does not exist", viewer.tls ? " or is not yours" : "")));
  }
  JobPageData d;
  d.job = *job;
  for (const auto& w : coordinator_->ListWorkers()) d.peaks[w.name()] = w.peak_flops_per_device();
  auto steps = coordinator_->JobOutputPath(id, "steps.jsonl");
  auto history = steps.ok() ? ReadStepHistory(*steps) : absl::StatusOr<StepHistory>(steps.status());
  if (history.ok()) {
    d.history = std::move(*history);
  } else {
    d.history_error = std::string(history.status().message());
  }
  const int64_t world = spec::WorldSize(job->spec());
  const int64_t shown = std::min<int64_t>(world, options_.max_log_ranks);
  d.ranks_not_shown = world - shown;
  for (int rank = 0; rank < shown; ++rank) {
    auto log = coordinator_->Logs(id, rank, -options_.log_tail_bytes, options_.log_tail_bytes);
    if (!log.ok()) {
      d.logs_error = std::string(log.status().message());
      break;
    }
    std::string text = log->data();
    // Start at a line: the first, cut one is dropped when the tail began inside the file.
    if (log->next_offset() > static_cast<int64_t>(text.size())) {
      const size_t nl = text.find('\n');
      if (nl != std::string::npos) text = text.substr(nl + 1);
    }
    d.log_tails.push_back({rank, std::move(text)});
  }
  return Page(200, RenderJobPage(viewer, d, page));
}

}  // namespace tessera::coordinator::ui
