// The chat-template fuzz target (tools/fuzz.sh chat): any bytes as a template — up to the first NUL —
// and, after it, as the conversation (JSON; a fixed one when it is not a JSON list). Parsing and
// rendering either succeed or fail with an error; never a crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/chat/chat_template.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Grüße 👋"},
          {"role": "assistant", "content": "Hi", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}])");
  if (nul != std::string::npos) {
    auto j = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.is_array()) messages = std::move(j);
  }
  auto t = tessera::formats::chat::ChatTemplate::Parse(source, {{"bos_token", "<s>"}, {"eos_token", "</s>"}}, {"<x>"});
  if (!t.ok()) return 0;
  tessera::formats::chat::RenderOptions limits;  // Small: every input finishes well within the fuzzer's timeout.
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_string_bytes = 1 << 20;
  t->set_limits(limits);
  for (bool prompt : {false, true}) (void)t->Render(messages, prompt);
  return 0;
}
