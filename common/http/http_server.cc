#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::http {
namespace {

constexpr size_t kMaxHead = 16 << 10;

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  char buf[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

// One connection's byte stream, plain or TLS.
class Stream {
 public:
  Stream(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  ssize_t Read(char* buf, size_t n) {
    if (ssl_ == nullptr) return recv(fd_, buf, n, 0);
    const int r = SSL_read(ssl_, buf, static_cast<int>(n));
    return r > 0 ? r : -1;
  }
  bool WriteAll(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n;
      if (ssl_ == nullptr) {
        n = send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      } else {
        const int r = SSL_write(ssl_, data.data() + done, static_cast<int>(data.size() - done));
        n = r > 0 ? r : -1;
      }
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

 private:
  int fd_;
  SSL* ssl_;
};

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `in`; false for a bad escape or a NUL.
bool PercentDecode(const std::string& in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = HexDigit(in[i + 1]), lo = HexDigit(in[i + 2]);
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

std::string Render(const Response& r, bool head) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", ReasonPhrase(r.status), "\r\nContent-Type: ", r.content_type,
                                 "\r\nContent-Length: ", r.body.size(), "\r\nConnection: close\r\n");
  for (const auto& [name, value] : r.headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  absl::StrAppend(&out, "\r\n");
  if (!head) out += r.body;
  return out;
}

Response Plain(int status, const std::string& text) {
  Response r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = text + "\n";
  return r;
}

}  // namespace

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 302: return "Found";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    default: return "Status";
  }
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, Handler handler) {
  std::unique_ptr<Server> s(new Server());
  s->options_ = options;
  s->handler_ = std::move(handler);
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == options.listen.size()) {
    return absl::InvalidArgumentError(absl::StrCat("address ", options.listen, ": is not host:port"));
  }
  std::string host = options.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = options.listen.substr(colon + 1);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("address ", options.listen, ": cannot resolve it"));
  }
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, 64) == 0;
  const std::string why = strerror(errno);
  freeaddrinfo(res);
  if (!ok) {
    if (fd >= 0) close(fd);
    return absl::InvalidArgumentError(absl::StrCat("address ", options.listen, ": cannot listen: ", why));
  }
  s->listen_fd_ = fd;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  s->address_ = absl::StrCat(options.listen.substr(0, colon), ":", bound_port);
  if (options.tls) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == nullptr) return absl::InternalError(absl::StrCat("TLS: ", OpenSslError()));
    s->ssl_ctx_ = ctx;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    const ServerOptions::Tls& t = *options.tls;
    if (SSL_CTX_use_certificate_chain_file(ctx, t.cert.c_str()) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(t.cert, ": not a usable certificate: ", OpenSslError()));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, t.key.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(t.key, ": not the private key of ", t.cert, ": ", OpenSslError()));
    }
    if (SSL_CTX_load_verify_locations(ctx, t.ca.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(t.ca, ": not a usable CA certificate: ", OpenSslError()));
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(t.ca.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
    // Asked for, not required: the handler answers a client without one. One presented must verify.
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  }
  for (int i = 0; i < std::max(1, options.threads); ++i) s->threads_.emplace_back([p = s.get()] { p->Serve(); });
  return s;
}

Server::~Server() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (ssl_ctx_ != nullptr) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

void Server::Serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;  // Another thread took it, or the peer left.
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (peer.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<sockaddr_in*>(&peer);
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
      port = ntohs(a->sin_port);
    } else if (peer.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<sockaddr_in6*>(&peer);
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
      port = ntohs(a->sin6_port);
    }
    ServeConnection(fd, absl::StrCat(host, ":", port));
    close(fd);
  }
}

namespace {

// The TLS handshake with an overall deadline: the socket's receive timeout bounds each read only, so a
// client trickling its ClientHello a byte at a time would otherwise hold a serving thread for as long
// as it likes (all of them with `threads` such clients, no certificate needed).
bool AcceptBefore(SSL* ssl, int fd, absl::Time deadline) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return false;
  bool accepted = false;
  while (true) {
    const int r = SSL_accept(ssl);
    if (r == 1) {
      accepted = true;
      break;
    }
    const int err = SSL_get_error(ssl, r);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) break;
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) break;
    pollfd p{fd, static_cast<short>(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000))) < 0 && errno != EINTR) break;
  }
  fcntl(fd, F_SETFL, flags);  // Blocking again, with the socket timeouts, for the request.
  return accepted;
}

}  // namespace

void Server::ServeConnection(int fd, const std::string& remote) {
  const int64_t ms = absl::ToInt64Milliseconds(options_.io_timeout);
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const absl::Time deadline = absl::Now() + options_.io_timeout;
  Request req;
  req.remote = remote;
  SSL* ssl = nullptr;
  if (ssl_ctx_ != nullptr) {
    req.tls = true;
    ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
    if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1 || !AcceptBefore(ssl, fd, deadline)) {
      ERR_clear_error();  // A failed handshake (no TLS, a certificate that does not verify): nothing to answer.
      if (ssl != nullptr) SSL_free(ssl);
      return;
    }
    X509* cert = SSL_get1_peer_certificate(ssl);
    if (cert != nullptr && SSL_get_verify_result(ssl) == X509_V_OK) {
      BIO* bio = BIO_new(BIO_s_mem());
      if (bio != nullptr && PEM_write_bio_X509(bio, cert) == 1) {
        char* data = nullptr;
        const long n = BIO_get_mem_data(bio, &data);
        if (n > 0) req.client_certificate_pem.assign(data, static_cast<size_t>(n));
      }
      BIO_free(bio);
    }
    X509_free(cert);
  }
  Stream stream(fd, ssl);
  std::string head;
  char buf[4096];
  Response resp;
  bool complete = false;
  while (head.size() <= kMaxHead && absl::Now() < deadline) {
    const ssize_t n = stream.Read(buf, sizeof(buf));
    if (n <= 0) break;
    head.append(buf, static_cast<size_t>(n));
    if (head.find("\r\n\r\n") != std::string::npos) {
      complete = true;
      break;
    }
  }
  bool head_only = false;
  if (!complete) {
    resp = head.size() > kMaxHead ? Plain(431, "request head over 16 KiB") : Plain(408, "incomplete request");
  } else {
    const std::string line = head.substr(0, head.find("\r\n"));
    const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    std::string target = sp1 != std::string::npos && sp2 > sp1 ? line.substr(sp1 + 1, sp2 - sp1 - 1) : "";
    req.method = sp1 == std::string::npos ? "" : line.substr(0, sp1);
    const size_t q = target.find('?');
    if (q != std::string::npos) req.query = target.substr(q + 1), target.resize(q);
    if (target.empty() || target[0] != '/' || line.compare(sp2 + 1, 7, "HTTP/1.") != 0 ||
        !PercentDecode(target, &req.path)) {
      resp = Plain(400, "not an HTTP/1.x request for a path");
    } else if (req.method != "GET" && req.method != "HEAD") {
      resp = Plain(405, "read-only: GET and HEAD only");
      resp.headers.push_back({"Allow", "GET, HEAD"});
    } else {
      head_only = req.method == "HEAD";
      resp = handler_(req);
    }
  }
  stream.WriteAll(Render(resp, head_only));
  if (ssl != nullptr) {
    SSL_shutdown(ssl);
    SSL_free(ssl);
  }
}

}  // namespace tessera::http
