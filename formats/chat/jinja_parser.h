// The Jinja parser: tokens (jinja_lexer.h) → the statement tree (jinja_ast.h), with Jinja's operator
// precedence (conditional < or < and < not < comparison < + - < ~ < * / // % < ** < unary < filters
// and tests < postfix). Statements: if/elif/else, for (with an `if` filter, else, tuple targets), set
// (names, namespace attributes, blocks), macro, call blocks, break/continue, generation. Anything else
// (include, extends, import, block, filter, with, raw) is refused, naming the tag and its line.
#ifndef TESSERA_FORMATS_CHAT_JINJA_PARSER_H_
#define TESSERA_FORMATS_CHAT_JINJA_PARSER_H_

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"
#include "formats/chat/jinja_ast.h"

namespace tessera::formats::chat {

// Parsing takes memory in proportion to the template (its tokens and tree, ~300 bytes a token): a
// template longer than this is refused. Real chat templates are a few KiB; the longest seen ~30 KiB.
constexpr size_t kMaxTemplateBytes = size_t{1} << 20;

// Expressions and blocks nest at most 200 deep, counting chains built left to right (a.b.c, x|f|g,
// 1 + 2 + 3) as deep as they are: InvalidArgument past that, as for any syntax error (naming the line).
absl::StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_PARSER_H_
