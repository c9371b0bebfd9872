// ChatTemplate: a tokenizer's chat template rendered as transformers' apply_chat_template renders it
// (tokenize=False): the Jinja template (jinja_parser.h, jinja_render.h) with the variables
// transformers passes — messages, tools and documents (None unless given), add_generation_prompt,
// and the tokenizer's special tokens (bos_token, eos_token, unk_token, sep_token, pad_token,
// cls_token, mask_token, additional_special_tokens) as strings.
//
//   auto t = ChatTemplate::FromTokenizerDir("llama-tokenizer/");
//   auto text = t->Render(messages_json, /*add_generation_prompt=*/false);
#ifndef TESSERA_FORMATS_CHAT_CHAT_TEMPLATE_H_
#define TESSERA_FORMATS_CHAT_CHAT_TEMPLATE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "formats/chat/jinja_ast.h"
#include "formats/chat/jinja_render.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::chat {

class ChatTemplate {
 public:
  // `source`: the template; `special_tokens`: name → text (bos_token → "<s>", ...);
  // `additional_special_tokens`: that list. A syntax error or an unsupported construct names its line.
  static absl::StatusOr<ChatTemplate> Parse(const std::string& source,
                                            const std::map<std::string, std::string>& special_tokens = {},
                                            const std::vector<std::string>& additional_special_tokens = {});
  // The template of a tokenizer as transformers saves it: DIR/chat_template.jinja, else the
  // "chat_template" of DIR/tokenizer_config.json (a string, or a list of {name, template} of which
  // "default" is taken); its special tokens from tokenizer_config.json (strings or {"content": ...})
  // and special_tokens_map.json. `path` may also name a tokenizer.json file: its directory is read.
  static absl::StatusOr<ChatTemplate> FromTokenizerDir(const std::string& path);

  // The text of `messages` (a JSON list of {"role", "content", ...}). `tools`: a JSON list or null.
  // An exception the template raises (raise_exception) is FailedPrecondition with its message.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                     const nlohmann::ordered_json& tools = nullptr) const;

  // The text of `messages` whose last message the model is to continue (transformers'
  // continue_final_message=True, how TRL renders a prompt that ends with an assistant message): the
  // rendering without the generation prompt, cut right after the last message's content (its last
  // text block when the content is a list). FailedPrecondition when the template drops or rewrites
  // that content so that its end cannot be found.
  absl::StatusOr<std::string> RenderContinuing(const nlohmann::ordered_json& messages,
                                               const nlohmann::ordered_json& tools = nullptr) const;

  const std::string& source() const { return source_; }
  // The limits of each rendering (jinja_render.h); the defaults suit real chat templates.
  void set_limits(const RenderOptions& limits) { limits_ = limits; }

 private:
  ChatTemplate() = default;
  std::string source_;
  std::shared_ptr<const Body> body_;
  std::map<std::string, std::string> special_;
  std::vector<std::string> additional_;
  RenderOptions limits_;
};

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_CHAT_TEMPLATE_H_
