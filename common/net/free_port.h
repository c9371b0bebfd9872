// Free TCP ports on the loopback interface.
#ifndef TESSERA_COMMON_NET_FREE_PORT_H_
#define TESSERA_COMMON_NET_FREE_PORT_H_

namespace tessera::net {

// A TCP port on 127.0.0.1 that was free a moment ago: a random port below the kernel's ephemeral
// range that binds, else the kernel's choice; -1 on failure. Another process may still take it
// before the caller binds it, so callers retry or fail clearly.
int PickFreePort();

}  // namespace tessera::net

#endif  // TESSERA_COMMON_NET_FREE_PORT_H_
