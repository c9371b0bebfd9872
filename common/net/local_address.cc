#include "common/net/local_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace tessera::net {
namespace {

// HOST and PORT of "HOST:PORT", "[V6]:PORT", "HOST" or a bare IPv6 address (port "0" when absent).
void SplitHostPort(const std::string& s, std::string* host, std::string* port) {
  *port = "0";
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    *host = s.substr(1, close == std::string::npos ? std::string::npos : close - 1);
    if (close != std::string::npos && close + 1 < s.size() && s[close + 1] == ':') *port = s.substr(close + 2);
    return;
  }
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || s.find(':') != colon) {  // No port, or a bare IPv6 address.
    *host = s;
    return;
  }
  *host = s.substr(0, colon);
  *port = s.substr(colon + 1);
}

// Numeric text of a socket address (no port).
std::string Numeric(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST] = {0};
  if (getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return buf;
}

}  // namespace

absl::StatusOr<std::string> LocalAddressTowards(const std::string& peer) {
  std::string host, port;
  SplitHostPort(peer, &host, &port);
  if (host.empty()) return absl::InvalidArgumentError(absl::StrCat("'", peer, "' names no host"));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); e != 0) {
    return absl::NotFoundError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(e)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    // connect() on a UDP socket only picks the route and the source address; nothing is sent.
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    const int rc = getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    close(fd);
    if (rc != 0) continue;
    std::string text = Numeric(reinterpret_cast<sockaddr*>(&local), len);
    if (!text.empty()) return text;
  }
  return absl::UnavailableError(absl::StrCat("no route from this machine to ", host, ": ", last_error));
}

absl::StatusOr<std::string> InterfaceWithAddress(const std::string& address) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return absl::InternalError(absl::StrCat("getifaddrs: ", std::strerror(errno)));
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owned(all, freeifaddrs);
  for (ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::string text = Numeric(i->ifa_addr, len);
    if (const size_t pct = text.find('%'); pct != std::string::npos) text.resize(pct);  // fe80::1%eth0
    if (text == address) return std::string(i->ifa_name);
  }
  return absl::NotFoundError(absl::StrCat("no interface of this machine has the address ", address));
}

bool IsNumericAddress(const std::string& address) {
  in_addr v4{};
  in6_addr v6{};
  return inet_pton(AF_INET, address.c_str(), &v4) == 1 || inet_pton(AF_INET6, address.c_str(), &v6) == 1;
}

bool IsLoopback(const std::string& address) {
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace tessera::net
