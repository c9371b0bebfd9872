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

namespace tessera::formats::chat {

// The limits of one rendering. A template comes from a downloaded tokenizer directory: whatever it
// does, the rendering ends with an error naming the limit it reached (ResourceExhausted) rather than
// crash, hang or take memory without bound. The defaults suit real chat templates with room to spare.
struct RenderOptions {
  // Nested calls of the template's own code: macros, `caller()` and macros' default values (a
  // recursive macro ends here).
  int max_call_depth = 64;
  // Blocks and expressions being run at once, counting those of every call in progress: how deep the
  // renderer recurses. One template nests at most 200 deep (the parser's limit); this bounds calls of
  // deeply nested macros. Measured: ~1.2 KiB of stack a level optimised, up to ~8 KiB under
  // AddressSanitizer (the fuzzer's build) — so 500 levels stay within a thread's 8 MiB either way.
  int max_nesting = 500;
  size_t max_output_bytes = size_t{256} << 20;  // A rendering longer than this is an error.
  // Work done, in steps (jinja_budget.h): one per statement, expression and loop iteration; one per
  // item printed, serialised or compared and two per item made (so a list shared 64 levels deep is
  // charged for its 2^64 items, not its 65 lists); one per 64 bytes of every string made, printed,
  // compared, read through or computed. Measured: the templates of tests/python/chat_template_test.py
  // take ~170,000 steps for a thousand turns of 500 bytes and ~700,000 for ten turns of 400 KB; a
  // template spending all 2,000,000 takes 0.2–0.8 s of CPU (2-core machine under load) and makes at
  // most 1,000,000 items and 128 MiB of strings.
  int64_t max_steps = 2'000'000;
  // The longest string a template may build (join, replace, ~, *, indent, printing, tojson); checked
  // before the string is made.
  size_t max_string_bytes = size_t{64} << 20;
};

// Renders `body` with `context` (a dict: the variables the template sees, besides the globals of
// jinja_builtins.h). The template's parse tree must outlive nothing: the result owns its text.
absl::StatusOr<std::string> RenderTemplate(const Body& body, const Value& context, const RenderOptions& options = {});

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_RENDER_H_
