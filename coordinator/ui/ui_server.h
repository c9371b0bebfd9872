// UiServer: the coordinator's read-only web dashboard (common/http), on its own address beside
// /metrics. GET /ui (workers and jobs), GET /ui/jobs/ID (one job's attempts, charts and log tails).
//
// Authorization is the RPCs' (authorizer.h): on a coordinator with TLS the dashboard is HTTPS with
// the coordinator's certificate, and a browser must present a user certificate of the cluster's CA
// (`tessera certs issue user NAME`, exported for the browser as in docs/dashboard.md): a user sees the workers and their own
// jobs, the --admins every job, a worker's certificate nothing. Without TLS it is plain HTTP and
// shows everything to everyone, as the RPCs do.
#ifndef TESSERA_COORDINATOR_UI_UI_SERVER_H_
#define TESSERA_COORDINATOR_UI_UI_SERVER_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/authorizer.h"
#include "common/http/http_server.h"
#include "coordinator/coordinator.h"
#include "coordinator/ui/ui_page.h"

namespace tessera::coordinator::ui {

struct UiServerOptions {
  std::string listen = "127.0.0.1:9465";  // host:port; port 0 picks a free one (address() says which).
  // The coordinator's TLS files: when set, HTTPS that asks for a client certificate of `ca`.
  std::optional<http::ServerOptions::Tls> tls;
  int refresh_s = 5;          // How often pages reload themselves.
  int log_tail_bytes = 3000;  // Of each rank's log on a job page.
  int max_log_ranks = 32;     // Ranks whose log tails a job page shows.
  int threads = 4;            // Requests served at once.
};

class UiServer {
 public:
  // Serves until destroyed. `coordinator` and `authorizer` must outlive it. Fails naming the
  // address (cannot listen) or the TLS file that cannot be used.
  static absl::StatusOr<std::unique_ptr<UiServer>> Start(const UiServerOptions& options, Coordinator* coordinator,
                                                        const Authorizer* authorizer);
  UiServer(const UiServer&) = delete;
  UiServer& operator=(const UiServer&) = delete;

  // "host:port" actually bound, and the URL of the overview page.
  const std::string& address() const { return server_->address(); }
  std::string url() const;

  // One request, as the server's threads call it (public for tests).
  http::Response Handle(const http::Request& request);

 private:
  UiServer(UiServerOptions options, Coordinator* coordinator, const Authorizer* authorizer)
      : options_(std::move(options)), coordinator_(coordinator), authorizer_(authorizer) {}
  http::Response JobPage(const std::string& id, const Caller& caller, const Viewer& viewer,
                         const PageOptions& page);

  UiServerOptions options_;
  Coordinator* coordinator_;
  const Authorizer* authorizer_;
  std::unique_ptr<http::Server> server_;  // Last: stopped (its threads joined) first.
};

}  // namespace tessera::coordinator::ui

#endif  // TESSERA_COORDINATOR_UI_UI_SERVER_H_
