#include "tests/testing/browser.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/testing/cli.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool OnPath(const std::string& tool) { return RunCommand({"sh", "-c", "command -v " + Quote(tool)}).exit_code == 0; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string BrowserUnavailable() {
  for (const char* tool : {"chromium", "certutil", "pk12util", "openssl", "unshare"}) {
    if (!OnPath(tool)) {
      return std::string(tool) + " is not installed (bash tools/setup.sh installs chromium and libnss3-tools)";
    }
  }
  if (geteuid() != 0) return "needs root: the browser's policy is mounted in a private mount namespace (unshare -m)";
  if (!fs::is_directory("/etc/chromium")) return "/etc/chromium does not exist (Debian's chromium package makes it)";
  return "";
}

Browser::Browser(const std::string& dir, const std::string& origin, const std::string& ca_pem,
                 const std::string& cert_pem, const std::string& key_pem)
    : dir_(dir) {
  fs::remove_all(dir);
  fs::create_directories(dir + "/home/.pki/nssdb");
  fs::create_directories(dir + "/etc/policies/managed");
  const std::string db = "sql:" + dir + "/home/.pki/nssdb";
  std::string script = "set -e; certutil -N -d " + Quote(db) + " --empty-password; certutil -A -d " + Quote(db) +
                       " -n tessera-ca -t CT,, -i " + Quote(ca_pem);
  if (!cert_pem.empty()) {
    const std::string p12 = dir + "/user.p12";
    script += "; openssl pkcs12 -export -in " + Quote(cert_pem) + " -inkey " + Quote(key_pem) + " -out " + Quote(p12) +
              " -passout pass:; pk12util -i " + Quote(p12) + " -d " + Quote(db) + " -W ''";
  }
  CliResult r = RunCommand({"sh", "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // The policy: pick the one certificate for the dashboard's origin without asking.
  std::ofstream(dir + "/etc/policies/managed/tessera-test.json")
      << "{\"AutoSelectCertificateForUrls\": [\"{\\\"pattern\\\":\\\"" << origin << "\\\",\\\"filter\\\":{}}\"]}\n";
  if (fs::exists("/etc/chromium/master_preferences")) {
    fs::copy_file("/etc/chromium/master_preferences", dir + "/etc/master_preferences",
                  fs::copy_options::overwrite_existing);
  }
}

std::string Browser::Run(const std::string& chromium_args, std::string* error) {
  const std::string out = dir_ + "/stdout", err = dir_ + "/stderr";
  // --no-sandbox: Chromium's sandbox refuses to run as root.
  const std::string script = "mount --bind " + Quote(dir_ + "/etc") + " /etc/chromium && HOME=" + Quote(dir_ + "/home") +
                             " exec timeout 60 chromium --headless --no-sandbox --disable-gpu --no-first-run "
                             "--disable-dev-shm-usage --hide-scrollbars --user-data-dir=" +
                             Quote(dir_ + "/profile") + " " + chromium_args + " > " + Quote(out) + " 2> " + Quote(err);
  CliResult r = RunCommand({"unshare", "-m", "sh", "-c", script});
  if (r.exit_code != 0 && error != nullptr) {
    *error = "chromium exited with " + std::to_string(r.exit_code) + ": " + r.output + ReadAll(err).substr(0, 4000);
  }
  return r.exit_code == 0 ? ReadAll(out) : "";
}

std::string Browser::DumpDom(const std::string& url, std::string* error) {
  return Run("--dump-dom " + Quote(url), error);
}

bool Browser::Screenshot(const std::string& url, const std::string& png, int width, int height, std::string* error) {
  fs::remove(png);
  Run("--screenshot=" + Quote(png) + " --window-size=" + std::to_string(width) + "," + std::to_string(height) + " " +
          Quote(url),
      error);
  return fs::exists(png) && fs::file_size(png) > 0;
}

}  // namespace tessera::testing
