// The machine's process table as tests read it (/proc): rank processes left over, counted, killed.
// A process may exit between the listing of /proc and the read of its command line: that is "gone",
// never an exception (libstdc++'s stream iterators threw "No such process" from such a read, which
// failed split_brain_test at random).
#ifndef TESSERA_TESTS_TESTING_PROCESS_TABLE_H_
#define TESSERA_TESTS_TESTING_PROCESS_TABLE_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace tessera::testing {

// Process `pid`'s command line, arguments separated by NUL; "" once it is gone or unreadable.
std::string Cmdline(pid_t pid);

// The processes whose command line contains every one of `needles`.
std::vector<pid_t> ProcessesMatching(const std::vector<std::string>& needles);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_PROCESS_TABLE_H_
