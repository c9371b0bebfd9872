// The Jinja parser: tokens (jinja_lexer.h) → the statement tree (jinja_ast.h), with Jinja's operator
// precedence (conditional < or < and < not < comparison < + - < ~ < * / // % < ** < unary < filters
// and tests < postfix). Statements: if/elif/else, for (with an `if` filter, else, tuple targets), set
// (names, namespace attributes, blocks), macro, call blocks, break/continue, generation. Anything else
// (include, extends, import, block, filter, with, raw) is refused, naming the tag and its line.
#ifndef TESSERA_FORMATS_CHAT_JINJA_PARSER_H_
#define TESSERA_FORMATS_CHAT_JINJA_PARSER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "formats/chat/jinja_ast.h"

namespace tessera::chat {

absl::StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace tessera::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_PARSER_H_
