// Exit codes of the tessera CLI (documented in README.md).
#ifndef TESSERA_CLIENT_EXIT_CODES_H_
#define TESSERA_CLIENT_EXIT_CODES_H_

namespace tessera::client {

constexpr int kExitOk = 0;
constexpr int kExitJobFailed = 1;     // The job ran and failed (a rank's error is printed).
constexpr int kExitBadInput = 2;      // Bad arguments, spec or data; nothing was started.
constexpr int kExitUnreachable = 3;   // The coordinator could not be reached.
constexpr int kExitTimedOut = 4;      // Following stopped at --timeout; the job goes on.
constexpr int kExitInterrupted = 130; // Stopped by Ctrl-C / SIGTERM; ranks stopped cleanly.

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_EXIT_CODES_H_
