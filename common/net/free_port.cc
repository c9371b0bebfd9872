#include "common/net/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace tessera::net {
namespace {

// Binds 127.0.0.1:port (0: the kernel's choice) and returns the port bound, or -1.
int TryBind(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  int bound = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    bound = ntohs(addr.sin_port);
  }
  close(fd);
  return bound;
}

}  // namespace

int PickFreePort() {
  // Below the kernel's ephemeral range: the port 0 trick hands out ports from that range, where every
  // outgoing connection on the machine also takes its local port, so a port picked there is soon
  // taken by some client (seen as EADDRINUSE when tests run side by side). Random ports below it are
  // only ever taken by another picker like this one.
  int low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (int a, b; range >> a >> b && a > 1024) low = a;
  if (low > 10000) {
    std::random_device seed;
    std::mt19937 rng(seed());
    std::uniform_int_distribution<int> pick(10000, low - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int port = TryBind(pick(rng));
      if (port > 0) return port;
    }
  }
  return TryBind(0);
}

}  // namespace tessera::net
