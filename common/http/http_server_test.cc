// HttpServer over real sockets: requests reach the handler, bad ones get their status without it;
// over TLS a client certificate of the CA reaches the handler, none reaches it as none, and one of
// another CA fails the handshake (curl as the client).
#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/tls/certificates.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::http {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::unique_ptr<Server> Echo(const ServerOptions& o) {
  auto s = Server::Start(o, [](const Request& r) {
    Response resp;
    resp.content_type = "text/plain";
    resp.body = absl::StrCat(r.method, " ", r.path, " ?", r.query, " tls=", r.tls, " cert=", !r.client_certificate_pem.empty());
    return resp;
  });
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// Sends `raw` over plain TCP to `address` and returns everything the server answered.
std::string Exchange(const std::string& address, const std::string& raw) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::stoi(address.substr(address.rfind(':') + 1)));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return "connect failed";
  size_t sent = 0;
  while (sent < raw.size()) {
    const ssize_t n = send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

TEST(HttpServerTest, PlainRequestsAndBadOnes) {
  auto s = Echo({});
  ASSERT_NE(s, nullptr);
  std::string r = Exchange(s->address(), "GET /ui/jobs/j%2D1?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r, HasSubstr("GET /ui/jobs/j-1 ?x=1 tls=0 cert=0"));
  EXPECT_THAT(r, HasSubstr("Content-Length: "));
  r = Exchange(s->address(), "HEAD /ui HTTP/1.1\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "") << "HEAD: no body";
  EXPECT_THAT(Exchange(s->address(), "POST /ui HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 405 "));
  EXPECT_THAT(Exchange(s->address(), "GET ui HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(s->address(), "GET /a%00b HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(s->address(), "GET /a%zz HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(s->address(), "GET /%4 HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(s->address(), "\x16\x03\x01 not http at all\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(s->address(), "GET /" + std::string(20000, 'a')), StartsWith("HTTP/1.1 431 "));
  EXPECT_THAT(Exchange(s->address(), "GET / HTTP/1.1\r\n"), StartsWith("HTTP/1.1 408 ")) << "closed before the end";
  EXPECT_THAT(Exchange(s->address(), "GET / HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200 ")) << "still serving";
}

TEST(HttpServerTest, BadAddressesAndFilesAreNamed) {
  ServerOptions o;
  o.listen = "no-port";
  EXPECT_THAT(std::string(Server::Start(o, nullptr).status().message()), HasSubstr("no-port"));
  o.listen = "127.0.0.1:0";
  o.tls = ServerOptions::Tls{"/nonexistent/ca.pem", "/nonexistent/c.pem", "/nonexistent/c.key"};
  EXPECT_THAT(std::string(Server::Start(o, nullptr).status().message()), HasSubstr("/nonexistent/c.pem"));
}

class HttpsTest : public ::testing::Test {
 protected:
  static std::string Curl(const std::string& args) {
    FILE* p = popen(("curl -sS --max-time 10 " + args + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; p != nullptr && (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
    if (p != nullptr) pclose(p);
    return out;
  }
};

TEST_F(HttpsTest, ClientCertificatesOfTheCaOnly) {
  if (system("command -v curl > /dev/null") != 0) GTEST_SKIP() << "curl is not installed";
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/https";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(tls::CreateAuthority(dir + "/ca", 1).ok());
  ASSERT_TRUE(tls::IssueCertificate(dir + "/ca", {{tls::Role::kCoordinator, "coordinator"}, {}, {}, 1}).ok());
  ASSERT_TRUE(tls::IssueCertificate(dir + "/ca", {{tls::Role::kUser, "alice"}, {}, {}, 1}).ok());
  ASSERT_TRUE(tls::CreateAuthority(dir + "/other", 1).ok());
  ASSERT_TRUE(tls::IssueCertificate(dir + "/other", {{tls::Role::kUser, "alice"}, {}, {}, 1}).ok());
  ServerOptions o;
  o.tls = ServerOptions::Tls{dir + "/ca/ca.pem", dir + "/ca/coordinator.pem", dir + "/ca/coordinator.key"};
  auto s = Echo(o);
  ASSERT_NE(s, nullptr);
  const std::string url = "https://" + s->address() + "/x", ca = " --cacert " + dir + "/ca/ca.pem ";
  EXPECT_EQ(Curl(ca + "--cert " + dir + "/ca/user-alice.pem --key " + dir + "/ca/user-alice.key " + url),
            "GET /x ? tls=1 cert=1");
  EXPECT_EQ(Curl(ca + url), "GET /x ? tls=1 cert=0");
  EXPECT_THAT(Curl(ca + "--cert " + dir + "/other/user-alice.pem --key " + dir + "/other/user-alice.key " + url),
              Not(HasSubstr("GET /x"))) << "another CA's certificate fails the handshake";
  EXPECT_THAT(Curl("http://" + s->address() + "/x"), Not(HasSubstr("GET /x"))) << "no plain HTTP on a TLS port";
  EXPECT_EQ(Curl(ca + url), "GET /x ? tls=1 cert=0") << "still serving";
}


// Before: the handshake had no overall deadline (the socket timeout bounds each read only), so clients
// trickling a ClientHello a byte at a time held every serving thread, no certificate needed.
TEST_F(HttpsTest, ClientsTricklingAHandshakeDoNotHoldTheServer) {
  if (system("command -v curl > /dev/null") != 0) GTEST_SKIP() << "curl is not installed";
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/https_trickle";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(tls::CreateAuthority(dir + "/ca", 1).ok());
  ASSERT_TRUE(tls::IssueCertificate(dir + "/ca", {{tls::Role::kCoordinator, "coordinator"}, {}, {}, 1}).ok());
  ServerOptions o;
  o.tls = ServerOptions::Tls{dir + "/ca/ca.pem", dir + "/ca/coordinator.pem", dir + "/ca/coordinator.key"};
  o.threads = 2;
  o.io_timeout = absl::Seconds(2);
  auto s = Echo(o);
  ASSERT_NE(s, nullptr);
  const std::string address = s->address();
  // As many tricklers as threads: a TLS record header announcing 512 bytes, then a byte every 300 ms
  // for 9 s (each read gets its byte well within the 2 s socket timeout).
  std::vector<std::thread> tricklers;
  for (int t = 0; t < 2; ++t) {
    tricklers.emplace_back([address] {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(std::stoi(address.substr(address.rfind(':') + 1)));
      inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return;
      const unsigned char header[] = {0x16, 0x03, 0x01, 0x02, 0x00};
      for (int i = 0; i < 30; ++i) {
        const unsigned char byte = i < 5 ? header[i] : 0x01;
        if (send(fd, &byte, 1, MSG_NOSIGNAL) != 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
      close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // Both connections are being served.
  const auto start = std::chrono::steady_clock::now();
  const std::string answer = Curl("--cacert " + dir + "/ca/ca.pem https://" + address + "/x");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (std::thread& t : tricklers) t.join();
  EXPECT_EQ(answer, "GET /x ? tls=1 cert=0");
  EXPECT_LT(waited, 5.0) << "served only after the tricklers gave up (their handshakes had no deadline)";
}
}  // namespace
}  // namespace tessera::http
