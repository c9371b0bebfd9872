// Runs a parsed template (jinja_parser.h) as Jinja does: output of {{ }} is Python's str() of the
// value (undefined prints nothing), scopes as Jinja's (a for loop's body is a new scope per iteration;
// if does not open one; macros see the template's top level), `loop` with index, index0, revindex,
// revindex0, first, last, length, previtem, nextitem and cycle(). An error names the line.
#ifndef TESSERA_FORMATS_CHAT_JINJA_RENDER_H_
#define TESSERA_FORMATS_CHAT_JINJA_RENDER_H_

#include <string>

#include "absl/status/statusor.h"
#include "formats/chat/jinja_ast.h"
#include "formats/chat/jinja_value.h"

namespace tessera::chat {

struct RenderOptions {
  int max_call_depth = 64;                  // Nested macro calls (a recursive macro ends here).
  size_t max_output_bytes = size_t{256} << 20;  // A rendering longer than this is an error.
  // Work done, in steps: one per statement, expression and loop iteration, and one per item or 256
  // bytes of every value computed. A template that runs longer (nested loops over large ranges) is an
  // error, not a hang. A chat of a thousand turns takes well under a million.
  int64_t max_steps = 5'000'000;
};

// Renders `body` with `context` (a dict: the variables the template sees, besides the globals of
// jinja_builtins.h). The template's parse tree must outlive nothing: the result owns its text.
absl::StatusOr<std::string> RenderTemplate(const Body& body, const Value& context, const RenderOptions& options = {});

}  // namespace tessera::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_RENDER_H_
