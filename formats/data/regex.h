// A compiled PCRE2 regex (UTF, Unicode properties, JIT) that finds every match in a text.
#ifndef TESSERA_FORMATS_DATA_REGEX_H_
#define TESSERA_FORMATS_DATA_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

struct pcre2_real_code_8;

namespace tessera::formats::data {

class Regex {
 public:
  // Compiles a PCRE2 pattern with PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE (Oniguruma's ^ and $ match
  // at line boundaries) and JIT-compiles it when the JIT is available.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern);
  ~Regex();

  // Per-thread matching state (match data and JIT stack). A Regex is shared; a Matcher is not.
  class Matcher {
   public:
    ~Matcher();
    // Appends the [begin, end) byte spans of the successive non-overlapping, non-empty matches in
    // `text`, leftmost first (an empty match advances one character). `text` must be valid UTF-8.
    absl::Status FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* spans);

   private:
    friend class Regex;
    struct State;
    explicit Matcher(const Regex* regex);
    const Regex* regex_;
    std::unique_ptr<State> state_;
  };
  std::unique_ptr<Matcher> NewMatcher() const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex(std::string pattern, pcre2_real_code_8* code, bool jit);
  std::string pattern_;
  pcre2_real_code_8* code_;
  bool jit_;
};

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_REGEX_H_
