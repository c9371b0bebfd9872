#include "formats/data/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace tessera::formats::data {
namespace {

std::string ErrorText(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex '", pattern, "' at byte ", offset, ": ", ErrorText(error)));
  }
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<Regex>(new Regex(pattern, code, jit));
}

Regex::Regex(std::string pattern, pcre2_code* code, bool jit) : pattern_(std::move(pattern)), code_(code), jit_(jit) {}
Regex::~Regex() { pcre2_code_free(code_); }

struct Regex::Matcher::State {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~State() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

Regex::Matcher::Matcher(const Regex* regex) : regex_(regex), state_(new State) {
  state_->data = pcre2_match_data_create_from_pattern(regex->code_, nullptr);
  state_->context = pcre2_match_context_create(nullptr);
  if (regex->jit_) {
    // Backtracking over long whitespace runs needs more than the default 32 KiB.
    state_->stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(state_->context, nullptr, state_->stack);
  }
}
Regex::Matcher::~Matcher() = default;

std::unique_ptr<Regex::Matcher> Regex::NewMatcher() const { return std::unique_ptr<Matcher>(new Matcher(this)); }

absl::Status Regex::Matcher::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* spans) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at <= text.size()) {
    const int rc = regex_->jit_ ? pcre2_jit_match(regex_->code_, subject, text.size(), at, PCRE2_NO_UTF_CHECK,
                                                  state_->data, state_->context)
                                : pcre2_match(regex_->code_, subject, text.size(), at, PCRE2_NO_UTF_CHECK,
                                              state_->data, state_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::ResourceExhaustedError(absl::StrCat("regex '", regex_->pattern_, "' failed at byte ", at,
                                                       " of a ", text.size(), "-byte text: ", ErrorText(rc)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state_->data);
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      spans->emplace_back(begin, end);
      at = end;
      continue;
    }
    // An empty match: step over one character.
    if (begin >= text.size()) break;
    at = begin + 1;
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  }
  return absl::OkStatus();
}

}  // namespace tessera::formats::data
