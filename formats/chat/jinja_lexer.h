// The Jinja lexer as transformers configures it for chat templates (trim_blocks, lstrip_blocks, no
// trailing newline kept): template text → text runs and the tokens of {{ }} and {% %} tags, with the
// whitespace control of `-` / `+` applied and comments dropped. Newlines are normalised to "\n".
#ifndef TESSERA_FORMATS_CHAT_JINJA_LEXER_H_
#define TESSERA_FORMATS_CHAT_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::formats::chat {

struct Token {
  enum class Type {
    kText,        // Literal output.
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // Identifiers and keywords (for, if, in, and, ...).
    kString,      // A string literal, escapes decoded.
    kInt,
    kFloat,
    kOp,          // Operators and punctuation: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    kEof,
  };
  Type type;
  std::string text;  // Text, name, decoded string or operator.
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;  // Of the token's first character.
};

// An error names the line ("line 3: unterminated string").
absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_LEXER_H_
