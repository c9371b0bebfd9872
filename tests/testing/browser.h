// A real browser for end-to-end tests of the dashboard: Debian's headless Chromium, with a tessera
// user's certificate imported into its own NSS database (certutil, pk12util, openssl) and chosen
// for the dashboard's origin by Chromium's AutoSelectCertificateForUrls policy. Chromium reads
// policies only from /etc/chromium/policies, so every run happens in a private mount namespace
// (unshare -m, root) where the browser's own policy directory is bind-mounted over /etc/chromium:
// the machine's configuration is never touched.
#ifndef TESSERA_TESTS_TESTING_BROWSER_H_
#define TESSERA_TESTS_TESTING_BROWSER_H_

#include <string>

namespace tessera::testing {

// Why a Browser cannot run here ("chromium is not installed", "needs root for unshare -m"), or
// empty when it can.
std::string BrowserUnavailable();

class Browser {
 public:
  // A profile in `dir` (fresh) that trusts `ca_pem` and, if `cert_pem` is not empty, presents that
  // certificate (with `key_pem`) to `origin` ("https://127.0.0.1:PORT"). Aborts the test on error.
  Browser(const std::string& dir, const std::string& origin, const std::string& ca_pem, const std::string& cert_pem,
          const std::string& key_pem);

  // The DOM after the page loaded (chromium --dump-dom), or "" with the error in *error.
  std::string DumpDom(const std::string& url, std::string* error = nullptr);
  // Saves a PNG of the page at `width`×`height` CSS pixels to `png`; false with *error.
  bool Screenshot(const std::string& url, const std::string& png, int width, int height, std::string* error = nullptr);

 private:
  std::string Run(const std::string& chromium_args, std::string* error);

  std::string dir_;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_BROWSER_H_
