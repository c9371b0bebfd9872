#include "generate/prompts_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tessera::client {

absl::StatusOr<std::vector<std::vector<int64_t>>> ReadPromptsFile(const std::string& path,
                                                                  const formats::data::Tokenizer* tokenizer,
                                                                  int64_t max_prompts, int64_t vocab) {
  // Opened without blocking and read only as a regular file: a FIFO or device is refused.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxPromptsFileBytes) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file of at most ", kMaxPromptsFileBytes, " bytes"));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  int64_t got = 0;
  while (got < st.st_size) {
    const ssize_t n = pread(fd, text.data() + got, text.size() - got, got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  close(fd);
  text.resize(static_cast<size_t>(got));
  std::unique_ptr<formats::data::Tokenizer::Encoder> encoder = tokenizer ? tokenizer->NewEncoder() : nullptr;
  std::vector<std::vector<int64_t>> prompts;
  size_t from = 0;
  for (int64_t line = 1; from < text.size(); ++line) {
    size_t end = text.find('\n', from);
    if (end == std::string::npos) end = text.size();
    const std::string_view body(text.data() + from, end - from);
    from = end + 1;
    if (body.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", why));
    };
    if (static_cast<int64_t>(prompts.size()) == max_prompts) return fail(absl::StrCat("more than ", max_prompts, " prompts"));
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return fail("not a JSON object");
    const bool has_text = j.contains("prompt"), has_ids = j.contains("prompt_ids");
    if (has_text == has_ids) return fail("give exactly one of \"prompt\" (text) and \"prompt_ids\" (a list of ids)");
    std::vector<int64_t> ids;
    if (has_ids) {
      const nlohmann::json& list = j["prompt_ids"];
      if (!list.is_array()) return fail("prompt_ids: must be a list of token ids");
      for (size_t k = 0; k < list.size(); ++k) {
        if (!list[k].is_number_integer() || list[k].get<int64_t>() < 0 || list[k].get<int64_t>() >= vocab) {
          return fail(absl::StrCat("prompt_ids[", k, "]: ", list[k].dump(), " is not a token id of the model's ", vocab));
        }
        ids.push_back(list[k].get<int64_t>());
      }
    } else {
      if (!j["prompt"].is_string()) return fail("prompt: must be a string");
      const std::string prompt = j["prompt"].get<std::string>();
      if (encoder) {
        std::vector<int32_t> encoded;
        if (absl::Status s = encoder->Encode(prompt, &encoded); !s.ok()) return fail(absl::StrCat("prompt: ", s.message()));
        for (int32_t id : encoded) {
          if (id >= vocab) return fail(absl::StrCat("prompt: token ", id, " is past the model's vocabulary of ", vocab));
        }
        ids.assign(encoded.begin(), encoded.end());
      } else {
        for (unsigned char ch : prompt) {
          if (ch >= vocab) {
            return fail(absl::StrCat("prompt: byte ", int{ch}, " is past the model's vocabulary of ", vocab,
                                     " (text as bytes needs 256 ids: give --tokenizer)"));
          }
          ids.push_back(ch);
        }
      }
    }
    if (ids.empty()) return fail("the prompt has no tokens");
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": holds no prompt"));
  return prompts;
}

}  // namespace tessera::client
