#include "formats/chat/jinja_lexer.h"

#include <cctype>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_value.h"
#include "formats/chat/py_case.h"

namespace tessera::formats::chat {
namespace {

// `s` without trailing Python whitespace.
std::string_view RStrip(std::string_view s) { return PyStrip(s, /*left=*/false, /*right=*/true); }

// The length of the Python whitespace at the start of `s`.
size_t LeadingSpace(std::string_view s) { return s.size() - PyStrip(s, /*left=*/true, /*right=*/false).size(); }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;    // What the previous match ended with was a newline (or the start).
    while (pos < src_.size()) {
      const size_t open = NextOpen(pos);
      std::string_view text(src_.data() + pos, (open == std::string::npos ? src_.size() : open) - pos);
      if (open == std::string::npos) {
        Emit(Token::Type::kText, std::string(text));
        line_ += Count(text);
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'.
      const char control = open + 2 < src_.size() ? src_[open + 2] : '\0';
      std::string_view kept = text;
      if (control == '-') {
        kept = RStrip(text);
      } else if (control != '+' && kind != '{') {
        // lstrip_blocks: spaces and tabs between the line's start and a block or comment tag go.
        const size_t line_start = text.rfind('\n') == std::string_view::npos ? 0 : text.rfind('\n') + 1;
        if ((line_start > 0 || line_starting) && line_start < text.size() &&
            RStrip(text.substr(line_start)).empty()) {
          kept = text.substr(0, line_start);
        }
      }
      Emit(Token::Type::kText, std::string(kept));
      line_ += Count(text);
      pos = open + 2 + (control == '-' || control == '+' ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", pos);
        if (close == std::string::npos) return Error("missing the end of a comment ('#}')");
        const bool minus = close > pos && src_[close - 1] == '-';
        const bool plus = close > pos && src_[close - 1] == '+';
        line_ += Count(std::string_view(src_).substr(pos, close - pos));
        pos = close + 2;
        FinishTag(&pos, minus, plus, /*trim=*/true, &line_starting);
        continue;
      }
      const bool is_var = kind == '{';
      Emit(is_var ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "");
      bool minus = false, plus = false;
      if (absl::Status s = LexTag(is_var, &pos, &minus, &plus); !s.ok()) return s;
      Emit(is_var ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "");
      FinishTag(&pos, minus, plus, /*trim=*/!is_var, &line_starting);
    }
    Emit(Token::Type::kEof, "");
    return std::move(tokens_);
  }

 private:
  static int Count(std::string_view s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  }

  absl::Status Error(const std::string& what) const { return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", what)); }

  size_t NextOpen(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos && i + 1 < src_.size(); i = src_.find('{', i + 1)) {
      const char c = src_[i + 1];
      if (c == '{' || c == '%' || c == '#') return i;
    }
    return std::string::npos;
  }

  // After a tag's closing delimiter: `-` strips the whitespace that follows; trim_blocks removes one
  // newline after a block or comment tag (not with `+`).
  void FinishTag(size_t* pos, bool minus, bool plus, bool trim, bool* line_starting) {
    *line_starting = false;
    if (minus) {
      const size_t n = LeadingSpace(std::string_view(src_).substr(*pos));
      *line_starting = n > 0 && src_[*pos + n - 1] == '\n';
      line_ += Count(std::string_view(src_).substr(*pos, n));
      *pos += n;
    } else if (trim && !plus && *pos < src_.size() && src_[*pos] == '\n') {
      ++*pos;
      ++line_;
      *line_starting = true;
    }
  }

  void Emit(Token::Type type, std::string text) {
    if (type == Token::Type::kText && text.empty()) return;
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }

  // The tokens of a tag up to its closing delimiter (at bracket depth 0), which *pos ends after.
  absl::Status LexTag(bool is_var, size_t* pos, bool* minus, bool* plus) {
    const std::string close = is_var ? "}}" : "%}";
    int depth = 0;
    size_t i = *pos;
    while (true) {
      while (i < src_.size() && (src_[i] == ' ' || src_[i] == '\t' || src_[i] == '\n' || src_[i] == '\r')) {
        line_ += src_[i] == '\n';
        ++i;
      }
      if (i >= src_.size()) return Error(absl::StrCat("missing the end of a tag ('", close, "')"));
      if (depth == 0) {
        for (const char* mod : {"-", "+", ""}) {
          const std::string end = std::string(mod) + close;
          if (src_.compare(i, end.size(), end) == 0) {
            *minus = mod[0] == '-';
            *plus = mod[0] == '+';
            *pos = i + end.size();
            return absl::OkStatus();
          }
        }
      }
      const char c = src_[i];
      Token t;
      t.line = line_;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
        t.type = Token::Type::kName;
        t.text = src_.substr(i, j - i);
        i = j;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t j = i;
        while (j < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
        bool is_float = false;
        if (j + 1 < src_.size() && src_[j] == '.' && std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
          is_float = true;
          ++j;
          while (j < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
        }
        if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
          size_t k = j + 1;
          if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
          if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
            is_float = true;
            j = k;
            while (j < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j]))) ++j;
          }
        }
        std::string digits;
        for (size_t k = i; k < j; ++k) {
          if (src_[k] != '_') digits += src_[k];
        }
        if (is_float) {
          t.type = Token::Type::kFloat;
          t.float_value = std::strtod(digits.c_str(), nullptr);
        } else {
          t.type = Token::Type::kInt;
          errno = 0;
          t.int_value = std::strtoll(digits.c_str(), nullptr, 10);
          if (errno == ERANGE) return Error(absl::StrCat("the integer ", digits, " is too large"));
        }
        t.text = digits;
        i = j;
      } else if (c == '\'' || c == '"') {
        auto s = LexString(&i);
        if (!s.ok()) return s.status();
        t.type = Token::Type::kString;
        t.text = *std::move(s);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                     "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        const char* found = nullptr;
        for (const char* op : kOps) {
          if (src_.compare(i, std::string_view(op).size(), op) == 0) {
            found = op;
            break;
          }
        }
        if (found == nullptr) return Error(absl::StrCat("unexpected character '", std::string(1, c), "' in a tag"));
        t.type = Token::Type::kOp;
        t.text = found;
        i += t.text.size();
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
        if (depth < 0) return Error(absl::StrCat("unexpected '", t.text, "'"));
      }
      tokens_.push_back(std::move(t));
    }
  }

  // A quoted literal at *i, its escapes decoded as Python's "unicode-escape" does (as Jinja does).
  absl::StatusOr<std::string> LexString(size_t* i) {
    const char quote = src_[*i];
    std::string out;
    size_t j = *i + 1;
    while (true) {
      if (j >= src_.size()) return Error("unterminated string");
      const char c = src_[j];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || j + 1 >= src_.size()) {
        out += c;
        ++j;
        continue;
      }
      const char e = src_[j + 1];
      j += 2;
      auto hex = [&](int n) -> int64_t {
        if (j + n > src_.size()) return -1;
        int64_t v = 0;
        for (int k = 0; k < n; ++k) {
          const char h = src_[j + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) return -1;
          v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        j += n;
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': ++line_; break;  // A backslash-newline continues the string.
        case 'x':
        case 'u':
        case 'U': {
          const int64_t v = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (v < 0 || v > 0x10ffff) return Error(absl::StrCat("a bad \\", std::string(1, e), " escape in a string"));
          AppendUtf8(static_cast<uint32_t>(v), &out);
          break;
        }
        case 'N': return Error("\\N{...} escapes are not supported in strings");
        default:
          if (e >= '0' && e <= '7') {
            int v = e - '0';
            for (int k = 0; k < 2 && j < src_.size() && src_[j] >= '0' && src_[j] <= '7'; ++k) v = v * 8 + (src_[j++] - '0');
            AppendUtf8(static_cast<uint32_t>(v), &out);
          } else {
            out += '\\';  // Unknown escapes stay as written.
            out += e;
          }
      }
    }
    *i = j + 1;
    return out;
  }

  std::string src_;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  // Newlines normalised; one trailing newline dropped (keep_trailing_newline=False).
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).Run();
}

}  // namespace tessera::formats::chat
