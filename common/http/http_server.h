// HttpServer: a small HTTP/1.1 server for read-only pages (the coordinator's dashboard), plain or
// over TLS with OpenSSL. One request per connection (Connection: close); GET and HEAD reach the
// handler, other methods get 405. Bounded: a request head of at most 16 KiB, read within
// `io_timeout`, at most `threads` connections served at once (more wait in the kernel's backlog).
//
// With TLS the server asks for a client certificate and verifies one presented against `ca` (the
// handshake fails if it does not verify); the handler sees the verified leaf certificate (PEM), or
// none, and decides.
#ifndef TESSERA_COMMON_HTTP_HTTP_SERVER_H_
#define TESSERA_COMMON_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::http {

struct Request {
  std::string method;  // "GET"
  std::string path;    // Percent-decoded, without the query ("/ui/jobs/j-1").
  std::string query;   // After '?', as sent.
  std::string remote;  // "127.0.0.1:51234" of the peer.
  bool tls = false;
  std::string client_certificate_pem;  // The verified client certificate; empty: none presented.
};

struct Response {
  int status = 200;
  std::string content_type = "text/html; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;  // Extra headers (names and values not from requests).
  std::string body;
};

using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port (IPv4 or [IPv6]); port 0 picks one.
  struct Tls {
    std::string ca, cert, key;  // PEM files.
  };
  std::optional<Tls> tls;
  int threads = 4;
  absl::Duration io_timeout = absl::Seconds(10);  // For the handshake, the request and the response.
};

class Server {
 public:
  // Listens and serves `handler` (called on the server's threads, concurrently) until destroyed.
  // Fails naming the address, or the TLS file that cannot be used.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options, Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const std::string& address() const { return address_; }  // "host:port" bound.

 private:
  Server() = default;
  void Serve();
  void ServeConnection(int fd, const std::string& remote);

  ServerOptions options_;
  Handler handler_;
  int listen_fd_ = -1;
  void* ssl_ctx_ = nullptr;  // SSL_CTX*, with TLS.
  std::string address_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// The reason phrase of a status code ("Not Found").
const char* ReasonPhrase(int status);

}  // namespace tessera::http

#endif  // TESSERA_COMMON_HTTP_HTTP_SERVER_H_
