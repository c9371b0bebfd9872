// Certificates for an end-to-end test's cluster (tessera certs' code, common/tls): a CA in a fresh
// directory, the coordinator's certificate, and workers' and users' certificates made on first use.
// The flags returned are the ones the daemons and the CLI take.
#ifndef TESSERA_TESTS_TESTING_CLUSTER_CERTS_H_
#define TESSERA_TESTS_TESTING_CLUSTER_CERTS_H_

#include <string>
#include <vector>

namespace tessera::testing {

class ClusterCerts {
 public:
  // Creates DIR (fresh) with a CA and the coordinator's certificate; aborts on error.
  explicit ClusterCerts(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // --tls_ca/--tls_cert/--tls_key for tessera-coordinator.
  std::vector<std::string> CoordinatorFlags() const;
  // The same for tessera-worker --name=NAME (its certificate is issued on first use).
  std::vector<std::string> WorkerFlags(const std::string& name);
  // --tls-ca/--tls-cert/--tls-key for the tessera CLI as user NAME.
  std::vector<std::string> CliFlags(const std::string& user);

  // The end-to-end tests' convention for path roots: a test's directory DIR holds its data and its
  // outputs, and is its user's own directory of the output root (DIR's parent; the user is named
  // like DIR's last component). --data_roots=DIR --output_root=PARENT, for both daemons.
  static std::vector<std::string> RootFlags(const std::string& dir);
  static std::string UserOf(const std::string& dir);

 private:
  std::vector<std::string> Flags(const std::string& stem, const char* dash) const;

  std::string dir_;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_CLUSTER_CERTS_H_
