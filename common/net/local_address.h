// This machine's addresses: which one reaches a given peer, and which interface carries one. For a
// node daemon that must tell others where to reach it (the worker's --host) and tell NCCL which
// interface to use. No traffic is sent.
#ifndef TESSERA_COMMON_NET_LOCAL_ADDRESS_H_
#define TESSERA_COMMON_NET_LOCAL_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"

namespace tessera::net {

// The local address the kernel would use as the source of traffic to `peer` ("HOST:PORT", "[V6]:PORT"
// or a bare host; names are resolved): a UDP socket is connected — which sends nothing — and its name
// read. A loopback peer gives a loopback address. Fails naming the peer when it cannot be resolved or
// no route leads to it.
absl::StatusOr<std::string> LocalAddressTowards(const std::string& peer);

// The name of the interface that has `address` (numeric IPv4 or IPv6), e.g. "eth0" or "lo". NotFound
// naming the address when no interface has it.
absl::StatusOr<std::string> InterfaceWithAddress(const std::string& address);

// Whether `address` is a numeric IPv4 or IPv6 address (not a name).
bool IsNumericAddress(const std::string& address);

// Whether `address` (numeric) is a loopback address (127.0.0.0/8 or ::1).
bool IsLoopback(const std::string& address);

}  // namespace tessera::net

#endif  // TESSERA_COMMON_NET_LOCAL_ADDRESS_H_
