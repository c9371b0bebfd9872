#include "rewards/verifiers.h"

#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/text/utf8.h"

namespace tessera::rewards {
namespace {

bool Digit(char c) { return c >= '0' && c <= '9'; }
bool Space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && Space(s.front())) s.remove_prefix(1);
  while (!s.empty() && Space(s.back())) s.remove_suffix(1);
  return s;
}

// The number starting at s[i] ([-+]?digits(,ddd)*(.digits)?), its length; 0 when none starts there.
size_t NumberAt(std::string_view s, size_t i) {
  size_t j = i;
  if (j < s.size() && (s[j] == '-' || s[j] == '+')) ++j;
  const size_t digits = j;
  while (j < s.size() && Digit(s[j])) ++j;
  if (j == digits) return 0;
  // Thousands groups: a comma followed by exactly three digits.
  while (j + 3 < s.size() + 0 && s[j] == ',' && Digit(s[j + 1]) && Digit(s[j + 2]) && Digit(s[j + 3]) &&
         (j + 4 >= s.size() || !Digit(s[j + 4]))) {
    j += 4;
  }
  if (j + 1 < s.size() && s[j] == '.' && Digit(s[j + 1])) {
    ++j;
    while (j < s.size() && Digit(s[j])) ++j;
  }
  return j - i;
}

// "-12.50" → "-12.5", "1e+20" → "100000000000000000000"; "" when `s` is not a decimal number
// (commas already removed; an exponent beyond ±1000 is not taken for one).
std::string CanonicalNumber(std::string_view s) {
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  int exponent = 0;
  if (const size_t e = s.find_first_of("eE"); e != std::string_view::npos) {
    std::string_view x = s.substr(e + 1);
    s = s.substr(0, e);
    bool minus = false;
    if (!x.empty() && (x[0] == '-' || x[0] == '+')) minus = x[0] == '-', x.remove_prefix(1);
    if (x.empty() || x.size() > 4) return "";
    for (char c : x) {
      if (!Digit(c)) return "";
      exponent = exponent * 10 + (c - '0');
    }
    if (exponent > 1000) return "";
    if (minus) exponent = -exponent;
  }
  const size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot), frac = dot == std::string_view::npos ? "" : s.substr(dot + 1);
  if (whole.empty() && frac.empty()) return "";
  for (char c : whole) {
    if (!Digit(c)) return "";
  }
  for (char c : frac) {
    if (!Digit(c)) return "";
  }
  if (exponent != 0) {
    // Move the decimal point: digits = whole + frac, the point after whole.size() + exponent of them.
    std::string digits = std::string(whole) + std::string(frac);
    int64_t point = static_cast<int64_t>(whole.size()) + exponent;
    if (point < 0) digits.insert(0, static_cast<size_t>(-point), '0'), point = 0;
    if (point > static_cast<int64_t>(digits.size())) digits.append(static_cast<size_t>(point) - digits.size(), '0');
    const std::string w = digits.substr(0, static_cast<size_t>(point)), f = digits.substr(static_cast<size_t>(point));
    return CanonicalNumber(std::string(negative ? "-" : "") + (w.empty() ? "0" : w) + (f.empty() ? "" : "." + f));
  }
  while (whole.size() > 1 && whole[0] == '0') whole.remove_prefix(1);
  while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);
  std::string out(whole.empty() ? "0" : std::string(whole));
  if (!frac.empty()) out.append(".").append(frac);
  if (negative && out != "0") out = "-" + out;
  return out;
}

}  // namespace

std::string ExtractAnswer(std::string_view c) {
  // The last \boxed{...} whose braces close: each '{' matched to its '}' in one pass (linear in the
  // text, also for a completion that repeats an unclosed \boxed{ many times).
  std::vector<size_t> close(c.size(), std::string_view::npos), open;
  for (size_t k = 0; k < c.size(); ++k) {
    if (c[k] == '{') open.push_back(k);
    if (c[k] == '}' && !open.empty()) close[open.back()] = k, open.pop_back();
  }
  for (size_t at = c.rfind("\\boxed{"); at != std::string_view::npos;
       at = at == 0 ? std::string_view::npos : c.rfind("\\boxed{", at - 1)) {
    const size_t brace = at + 6;
    if (close[brace] != std::string_view::npos) return std::string(c.substr(brace + 1, close[brace] - brace - 1));
  }
  // Else the last number.
  std::string_view last;
  for (size_t i = 0; i < c.size();) {
    // A number starts at a sign or digit not preceded by a digit or a decimal point (a thousands
    // group after a comma is taken by the number it belongs to; "2,3,5" is three numbers).
    const bool boundary = i == 0 || !(Digit(c[i - 1]) || c[i - 1] == '.');
    const size_t n = boundary ? NumberAt(c, i) : 0;
    if (n > 0) {
      last = c.substr(i, n);
      i += n;
    } else {
      ++i;
    }
  }
  return std::string(last);
}

std::string NormalizeAnswer(std::string_view answer) {
  const std::string_view t = Trim(answer);
  std::string no_commas;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ',' && i > 0 && Digit(t[i - 1]) && i + 1 < t.size() && Digit(t[i + 1])) continue;
    no_commas += t[i];
  }
  if (std::string number = CanonicalNumber(no_commas); !number.empty()) return number;
  std::string out;
  bool space = false;
  for (char ch : t) {
    if (Space(ch)) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += ch;
  }
  return out;
}

absl::StatusOr<double> ExactAnswerReward(std::string_view completion, const nlohmann::json& answer) {
  std::string expected;
  if (answer.is_string()) {
    expected = answer.get<std::string>();
  } else if (answer.is_number()) {
    expected = answer.dump();
  } else {
    return absl::InvalidArgumentError(answer.is_null()
                                          ? "answer: the prompt row has no answer field (exact_answer compares with it)"
                                          : "answer: must be a string or a number");
  }
  const std::string given = ExtractAnswer(completion);
  if (given.empty()) return 0.0;
  return NormalizeAnswer(given) == NormalizeAnswer(expected) ? 1.0 : 0.0;
}

absl::StatusOr<double> SoftOverlongPunishment(int64_t tokens, int64_t max_tokens, int64_t soft_cache) {
  if (max_tokens <= 0 || soft_cache < 0 || soft_cache > max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("length: needs max_tokens > 0 and 0 <= soft_cache <= max_tokens (got ",
                                                   max_tokens, " and ", soft_cache, ")"));
  }
  if (tokens <= max_tokens - soft_cache) return 0.0;
  if (tokens <= max_tokens) return static_cast<double>(max_tokens - soft_cache - tokens) / static_cast<double>(soft_cache);
  return -1.0;
}

absl::StatusOr<std::unique_ptr<RegexReward>> RegexReward::Create(const std::string& pattern) {
  auto regex = formats::data::Regex::Compile(pattern);
  if (!regex.ok()) return absl::InvalidArgumentError(absl::StrCat("pattern: ", regex.status().message()));
  return std::unique_ptr<RegexReward>(new RegexReward(*std::move(regex)));
}

absl::StatusOr<double> RegexReward::Score(std::string_view completion) {
  const std::string text = text::Utf8Lossy(completion);
  std::vector<std::pair<size_t, size_t>> spans;
  if (absl::Status s = matcher_->FindAll(text, &spans); !s.ok()) return s;
  return spans.empty() ? 0.0 : 1.0;
}

}  // namespace tessera::rewards
