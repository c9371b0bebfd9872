// The renderer's own contracts: errors that name the line and the construct, the sandbox's limits,
// exceptions a template raises. (What it renders is compared with transformers' own rendering in
// tests/python/chat_template_test.py.)
#include "formats/chat/chat_template.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::chat {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> Render(const std::string& source, const std::string& messages = "[]") {
  auto t = ChatTemplate::Parse(source, {{"bos_token", "<s>"}});
  if (!t.ok()) return t.status();
  return t->Render(nlohmann::ordered_json::parse(messages), /*add_generation_prompt=*/false);
}

TEST(ChatTemplateTest, SyntaxErrorsNameTheLine) {
  auto r = Render("{% for m in messages %}\n{{ m.content }\n{% endfor %}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("line 2"));
  auto empty = Render("{{ messages[ ] }}");  // Found by the fuzzer: a null index, dereferenced.
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("expected an expression in []"));
  auto unclosed = Render("{% if true %}\nx\n");
  ASSERT_FALSE(unclosed.ok());
  EXPECT_THAT(unclosed.status().message(), HasSubstr("expected elif or else or endif"));
}

TEST(ChatTemplateTest, UnsupportedConstructsAreNamed) {
  auto include = Render("a\n{% include 'other.jinja' %}");
  ASSERT_FALSE(include.ok());
  EXPECT_THAT(include.status().message(), HasSubstr("line 2: the tag 'include' is not supported"));
  auto filter = Render("{{ 'x' | wordwrap(3) }}");
  ASSERT_FALSE(filter.ok());
  EXPECT_THAT(filter.status().message(), HasSubstr("the filter 'wordwrap' is not supported"));
}

TEST(ChatTemplateTest, RaisedExceptionsCarryTheirMessage) {
  auto r = Render("{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with user') }}{% endif %}",
                  R"([{"role": "assistant", "content": "hi"}])");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("Conversations must start with user"));
}

TEST(ChatTemplateTest, TheSandboxsLimitsHold) {
  auto range = Render("{% for i in range(200000) %}{% endfor %}");
  ASSERT_FALSE(range.ok());
  EXPECT_THAT(range.status().message(), HasSubstr("range too big"));
  auto recursion = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(recursion.ok());
  EXPECT_THAT(recursion.status().message(), HasSubstr("nested deeper than 64"));
  auto forever = Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_FALSE(forever.ok());
  EXPECT_THAT(forever.status().message(), HasSubstr("ran more than 2000000 steps"));
  auto big = Render("{% for i in range(100000) %}{% set s = 'x' * 60000000 %}{% endfor %}");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("ran more than 2000000 steps"));
  auto mutate = Render("{% set l = [] %}{{ l.append(1) }}");
  ASSERT_FALSE(mutate.ok());
  EXPECT_THAT(mutate.status().message(), HasSubstr("'append'"));
  auto undefined = Render("{{ nothing.at_all }}");
  ASSERT_FALSE(undefined.ok());
  EXPECT_THAT(undefined.status().message(), HasSubstr("'nothing' is undefined"));
}

// Nothing in a template or its input can exhaust the stack: parsing, values built in loops, printing,
// comparing and releasing them.
TEST(ChatTemplateTest, DeepNestingIsRefusedOrHandledWithoutRecursion) {
  auto parens = Render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
  ASSERT_FALSE(parens.ok());
  EXPECT_THAT(parens.status().message(), HasSubstr("nested deeper than 200"));
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  auto blocks = Render(ifs);
  ASSERT_FALSE(blocks.ok());
  EXPECT_THAT(blocks.status().message(), HasSubstr("nested deeper than 200"));
  auto lists = Render("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}");
  ASSERT_FALSE(lists.ok());
  EXPECT_THAT(lists.status().message(), HasSubstr("nested deeper than 256 levels"));
  // A chain of 100,000 namespaces (each holds the previous): rendered, printed, compared, released.
  auto chain = Render(
      "{% set ns = namespace(x=none) %}{% for i in range(100000) %}{% set ns.x = namespace(p=ns.x) %}{% endfor %}"
      "{{ ns.x.p.p is defined }} {{ ns.x == ns.x }} {{ ([ns.x] | string)[:30] }}");
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(*chain, "True True [<Namespace {'p': <Namespace {");
  std::string deep_json = std::string(100, '[') + std::string(100, ']');
  auto json = Render("{{ messages }}", "[{\"role\": \"user\", \"content\": " + deep_json + "}]");
  ASSERT_FALSE(json.ok());
  EXPECT_THAT(json.status().message(), HasSubstr("messages: nested deeper than 64 levels"));
}

TEST(ChatTemplateTest, SpecialTokensAndTheConversationAreVariables) {
  auto r = Render("{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m['content'] }}]{% endfor %}",
                  R"([{"role": "user", "content": "hi"}])");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "<s>[user:hi]");
}

// Continuing a final message (transformers' continue_final_message): the text ends right after its
// content, also when the template trims it or writes it as a list of blocks; a template that drops
// the content is refused. (tests/python/preference_data_test.py compares real templates with transformers.)
TEST(ChatTemplateTest, ContinuingTheFinalMessageEndsTheTextAfterItsContent) {
  const nlohmann::ordered_json prefill = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure, "}])");
  auto plain = ChatTemplate::Parse("{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}");
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto r = plain->RenderContinuing(prefill);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "<user>Hi</user><assistant>Sure, ");
  auto trimmed = ChatTemplate::Parse("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}");
  ASSERT_TRUE(trimmed.ok());
  r = trimmed->RenderContinuing(prefill);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "<user>Hi</user><assistant>Sure,");
  auto blocks = ChatTemplate::Parse(
      "{% for m in messages %}{% for b in m.content %}{{ b.text }}|{% endfor %}{% endfor %}");
  ASSERT_TRUE(blocks.ok());
  r = blocks->RenderContinuing(nlohmann::ordered_json::parse(
      R"([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "image", "text": "b"}]}])"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "a|b");
  // Whitespace is Python's: a trimmed template loses a no-break space and an ideographic space too.
  auto unicode = nlohmann::ordered_json::parse(R"([{"role": "assistant", "content": "Sure,\u00a0\u3000 "}])");
  auto tag_trimmed = ChatTemplate::Parse("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}|{% endfor %}");
  ASSERT_TRUE(tag_trimmed.ok());
  r = tag_trimmed->RenderContinuing(unicode);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "<assistant>Sure,");
  auto roles_only = ChatTemplate::Parse("{% for m in messages %}<{{ m.role }}>{% endfor %}");
  ASSERT_TRUE(roles_only.ok());
  EXPECT_EQ(roles_only->RenderContinuing(prefill).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(plain->RenderContinuing(nlohmann::ordered_json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::formats::chat
