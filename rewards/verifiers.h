// Built-in verifiers (`grpo.rewards` entries with a `kind`, issue 57): each scores one completion.
//   exact_answer  1 when the completion's answer equals the prompt row's `answer` field, else 0.
//                 The completion's answer is the content of its last \boxed{...} (braces balanced),
//                 else its last number ([-+]?digits with optional thousands commas and decimals). Both
//                 sides are normalised before they are compared: spaces trimmed; a number loses its
//                 thousands commas, a leading +, leading zeros and trailing decimal zeros (so "1,000.50"
//                 = "1000.5", "-0" = "0"); other text has its runs of whitespace made one space.
//   length        DAPO's soft overlong punishment over the completion's tokens, as TRL's
//                 get_soft_overlong_punishment(max_tokens, soft_cache): 0 up to max − cache tokens,
//                 then falling linearly to −1 at max, −1 beyond.
//   regex         1 when the pattern (PCRE2, UTF) has a non-empty match anywhere in the completion, else 0.
// No torch.
#ifndef TESSERA_REWARDS_VERIFIERS_H_
#define TESSERA_REWARDS_VERIFIERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "formats/data/regex.h"
#include "nlohmann/json.hpp"

namespace tessera::rewards {

// The answer a completion gives ("" when it gives none), before normalisation.
std::string ExtractAnswer(std::string_view completion);
// The form answers are compared in.
std::string NormalizeAnswer(std::string_view answer);
// `answer`: the row's field, a string or a number; InvalidArgument for anything else (null: missing).
absl::StatusOr<double> ExactAnswerReward(std::string_view completion, const nlohmann::json& answer);

// InvalidArgument unless 0 <= soft_cache <= max_tokens and max_tokens > 0.
absl::StatusOr<double> SoftOverlongPunishment(int64_t completion_tokens, int64_t max_tokens, int64_t soft_cache);

class RegexReward {
 public:
  // InvalidArgument naming the pattern's error.
  static absl::StatusOr<std::unique_ptr<RegexReward>> Create(const std::string& pattern);
  // Invalid UTF-8 in the completion is read as U+FFFD.
  absl::StatusOr<double> Score(std::string_view completion);

 private:
  explicit RegexReward(std::unique_ptr<formats::data::Regex> regex)
      : regex_(std::move(regex)), matcher_(regex_->NewMatcher()) {}
  std::unique_ptr<formats::data::Regex> regex_;
  std::unique_ptr<formats::data::Regex::Matcher> matcher_;
};

}  // namespace tessera::rewards

#endif  // TESSERA_REWARDS_VERIFIERS_H_
