// A chat template is a program from a downloaded tokenizer directory: whatever it does, rendering
// ends within a bounded time and memory, with an error that names the limit it reached — never a
// crash (stack overflow, an uncaught exception, undefined behaviour), a hang or memory without bound.
// Each case below was reported or found by reading the renderer (issue 54, item 7); those that fit the
// fuzzer's 8 KiB inputs are also in its corpus (fuzz/corpus/chat/limits-*).
#include <malloc.h>
#include <time.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "formats/chat/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::chat {
namespace {

using ::testing::HasSubstr;

// Each case takes well under 1 s of CPU. The test allows 5 s of the thread's CPU time — the work done,
// whatever else the machine runs (on a loaded 2-core machine the wall time was seen 6x the CPU time) —
// and 60 s of wall time. A hang (the reported ones would run for years: 2^64 items) is far beyond both.
constexpr absl::Duration kCpuBound = absl::Seconds(5);
constexpr absl::Duration kWallBound = absl::Seconds(60);
// The peak resident memory of one case; the limits keep it well under this (RenderOptions).
constexpr int64_t kMemoryBoundKiB = int64_t{1} << 20;  // 1 GiB.

constexpr absl::StatusCode kOk = absl::StatusCode::kOk;
constexpr absl::StatusCode kExhausted = absl::StatusCode::kResourceExhausted;
constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

struct Case {
  std::string name;
  std::string source;
  absl::StatusCode code;
  std::string expected;  // A piece of the error naming the limit, or the whole text when rendered.
  // The conversation: none, or one message with `content_bytes` of content and an object of `big_keys`.
  int big_keys = 0;
  int content_bytes = 0;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

const char kM[] = "9223372036854775807";  // INT64_MAX; INT64_MIN is written -M-1.
const std::string kMin = absl::StrCat("-", kM, "-1");
// A list holding one list twice, 64 levels deep: 65 lists in memory, 2^64 items to visit.
const std::string kShared =
    "{% set ns = namespace(x=[], y=[]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}"
    "{% set ns.y = [ns.y, ns.y] %}{% endfor %}";
const std::string kSteps = "ran more than 2000000 steps";
const std::string kCalls = "nested deeper than 64";
const std::string kString = "longer than 67108864 bytes";
const std::string kNesting = "nested deeper than 200";
const std::string kNestingAcrossCalls = "blocks and expressions nested deeper than 500";

// [{"role": "user", "content": "xx...", "big": {"k0": 0, ...}}]. The object is filled in place: nlohmann's
// ordered_json searches its keys on every insertion, parsing too (quadratic: minutes for 300,000 keys).
nlohmann::ordered_json Messages(int big_keys, int content_bytes) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (big_keys == 0 && content_bytes == 0) return messages;
  nlohmann::ordered_json big = nlohmann::ordered_json::object();
  auto& keys = big.get_ref<nlohmann::ordered_json::object_t&>();
  keys.reserve(static_cast<size_t>(big_keys));
  for (int i = 0; i < big_keys; ++i) keys.emplace_back(absl::StrCat("k", i), i);  // The vector's, no search.
  messages.push_back({{"role", "user"}, {"content", std::string(content_bytes, 'x')}, {"big", std::move(big)}});
  return messages;
}

std::vector<Case> Cases() {
  std::vector<Case> c = {
      // Calls: every call of user code (macros, caller, macro defaults) counts against the depth.
      {"caller_kept_in_a_namespace",
       "{% set ns = namespace() %}{% macro keep() %}{% set ns.c = caller %}{% endmacro %}"
       "{% call keep() %}{{ ns.c() }}{% endcall %}{{ ns.c() }}",
       kExhausted, kCalls},
      {"caller_calls_its_macro",
       "{% macro f() %}{{ caller() }}{% endmacro %}{% macro g() %}{% call f() %}{{ g() }}{% endcall %}{% endmacro %}"
       "{{ g() }}",
       kExhausted, kCalls},
      {"macro_default_calls_the_macro", "{% macro f(x=f()) %}{% endmacro %}{{ f() }}", kExhausted, kCalls},
      {"macro_recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", kExhausted, kCalls},
      {"macro_recursion_through_deep_bodies",
       "{% macro f(n) %}" + Repeat("{% if true %}", 40) + "{{ " + Repeat("[", 50) + "f(n + 1)" + Repeat("]", 50) +
           " }}" + Repeat("{% endif %}", 40) + "{% endmacro %}{{ f(0) }}",
       kExhausted, kNestingAcrossCalls},
      {"macro_recursion_through_deep_calls",
       "{% macro g(x) %}{{ x }}{% endmacro %}{% macro f(n) %}{{ " + Repeat("g(", 60) + "f(n + 1)" + Repeat(")", 60) +
           " }}{% endmacro %}{{ f(0) }}",
       kExhausted, kNestingAcrossCalls},
      // Shared structure is charged by the work of visiting it, not by its size in memory — except a
      // list compared with itself, which Python (identity first) answers without visiting it.
      {"shared_list_equal_itself", kShared + "{{ ns.x == ns.x }} {{ ns.x != ns.x }} {{ ns.x in [ns.x] }}", kOk,
       "True False True"},
      {"shared_lists_equal", kShared + "{{ ns.x == ns.y }}", kExhausted, kSteps},
      {"shared_lists_not_equal", kShared + "{{ ns.x != ns.y }}", kExhausted, kSteps},
      {"shared_lists_less", kShared + "{{ ns.x < ns.y }}", kExhausted, kSteps},
      {"shared_list_in", kShared + "{{ ns.x in [ns.y] }}", kExhausted, kSteps},
      {"shared_list_tojson", kShared + "{{ ns.x|tojson }}", kExhausted, kSteps},
      {"shared_list_tojson_indent", kShared + "{{ ns.x|tojson(indent=2) }}", kExhausted, kString},
      {"shared_list_printed", kShared + "{{ ns.x }}", kExhausted, kSteps},
      {"shared_list_string", kShared + "{{ ns.x|string|length }}", kExhausted, kSteps},
      {"shared_list_join", kShared + "{{ ns.x|join }}", kExhausted, kSteps},
      {"shared_list_unique", kShared + "{{ [ns.x, ns.y]|unique|length }}", kExhausted, kSteps},
      {"shared_list_sort", kShared + "{{ [ns.x, ns.y]|sort|length }}", kExhausted, kSteps},
      {"shared_namespaces_printed",
       "{% set n = namespace(x=none) %}{% for i in range(64) %}{% set n.x = namespace(a=n.x, b=n.x) %}{% endfor %}"
       "{{ n.x }}",
       kExhausted, kSteps},
      // Slices and ranges with steps near INT64_MAX / INT64_MIN: Python's results, no overflow.
      {"slice_step_max", absl::StrCat("{{ 'abcdef'[1::", kM, "] }}"), kOk, "b"},
      {"slice_step_min", absl::StrCat("{{ 'abcdef'[::", kMin, "] }}"), kOk, "f"},
      {"slice_bounds_min_max", absl::StrCat("{{ 'abcdef'[", kMin, ":", kM, ":", kM, "] }}"), kOk, "a"},
      {"slice_bounds_max_min", absl::StrCat("{{ 'abcdef'[", kM, ":", kMin, ":", kMin, "] }}"), kOk, "f"},
      {"slice_reversed_whole", absl::StrCat("{{ 'abcdef'[", kM, ":", kMin, ":-1] }}"), kOk, "fedcba"},
      {"slice_list_step_max", absl::StrCat("{{ [1, 2, 3][::", kM, "] }}"), kOk, "[1]"},
      {"slice_list_step_min", absl::StrCat("{{ [1, 2, 3][::", kMin, "] }}"), kOk, "[3]"},
      {"range_step_max", absl::StrCat("{{ range(0, 10, ", kM, ") }}"), kOk, "[0]"},
      {"range_step_max_from_5", absl::StrCat("{{ range(5, 10, ", kM, ") }}"), kOk, "[5]"},
      {"range_near_max", absl::StrCat("{{ range(", kM, " - 1, ", kM, ", 2) }}"), kOk, "[9223372036854775806]"},
      {"range_step_min", absl::StrCat("{{ range(-5, -10, ", kMin, ") }}"), kOk, "[-5]"},
      {"range_min_to_max", absl::StrCat("{{ range(", kMin, ", ", kM, ", ", kM, ") }}"), kOk,
       "[-9223372036854775808, -1, 9223372036854775806]"},
      {"range_max_to_min", absl::StrCat("{{ range(", kM, ", ", kMin, ", ", kMin, ") }}"), kOk,
       "[9223372036854775807, -1]"},
      {"range_whole_int64", absl::StrCat("{{ range(-", kM, ", ", kM, ") }}"), kInvalid, "range too big"},
      {"range_whole_int64_down", absl::StrCat("{{ range(", kM, ", ", kMin, ", -1) }}"), kInvalid, "range too big"},
      // Repetition, string building and splitting are bounded before the memory is taken.
      {"string_repeated_max", absl::StrCat("{{ 'x' * ", kM, " }}"), kExhausted, kString},
      {"empty_string_repeated_max", absl::StrCat("{{ ('' * ", kM, ")|length }}"), kOk, "0"},
      {"empty_list_repeated_max", absl::StrCat("{{ ([] * ", kM, ")|length }}"), kOk, "0"},
      {"list_repeated", "{{ ([0] * 60000000)|length }}", kExhausted, kSteps},
      {"range_repeated", "{{ (range(100000) * 600)|length }}", kExhausted, kSteps},
      {"lists_doubled", "{% set ns = namespace(x=[0]) %}{% for i in range(64) %}{% set ns.x = ns.x + ns.x %}"
                        "{% endfor %}{{ ns.x|length }}",
       kExhausted, kSteps},
      {"replace_empty", "{{ ('ab' * 10000000)|replace('', 'xyz')|length }}", kExhausted, kString},
      {"replace_empty_long", "{{ ('ab' * 1000000)|replace('', 'x' * 100000)|length }}", kExhausted, kString},
      {"replace_method_long", "{{ ('ab' * 1000000).replace('a', 'x' * 100000)|length }}", kExhausted, kString},
      {"join_filter_long", "{{ range(100000)|join('x' * 1000000) }}", kExhausted, kString},
      {"join_method_long", "{{ ('x' * 1000000).join(['a'] * 100000) }}", kExhausted, kString},
      {"indent_long", "{{ ('a\\n' * 5000000)|indent('x' * 10000) }}", kExhausted, kString},
      {"indent_many_lines", "{{ ('\\n' * 60000000)|indent|length }}", kExhausted, kSteps},
      {"concat_long", "{{ messages[0].content ~ messages[0].content }}", kExhausted, kString, 0, 40000000},
      {"map_over_long_strings", "{{ (['x' * 60000000] * 1000)|map('upper')|list|length }}", kExhausted, kSteps},
      {"split_on_a_number", "{{ 'abc'.split(1) }}", kInvalid, "separator must be a non-empty str"},
      // Python's: None splits on runs of whitespace; maxsplit leaves the rest (its own trailing space kept).
      {"split_none_maxsplit", "{{ ' a  b c '.split(None, 1) }}|{{ ' a  b c '.split(maxsplit=1) }}", kOk,
       "['a', 'b c ']|['a', 'b c ']"},
      {"split_none_maxsplit_zero", "{{ '  a b '.split(None, 0) }}", kOk, "['a b ']"},
      {"split_many", "{{ (' a' * 30000000).split()|length }}", kExhausted, kSteps},
      {"splitlines_many", "{{ ('\\n' * 60000000).splitlines()|length }}", kExhausted, kSteps},
      {"for_over_long_string", "{% for c in 'x' * 60000000 %}{% endfor %}", kExhausted, kSteps},
      {"list_of_long_string", "{{ ('x' * 60000000)|list|length }}", kExhausted, kSteps},
      {"reverse_long_string", "{{ ('é' * 30000000)|reverse|length }}", kExhausted, kSteps},
      {"unique_quadratic", "{{ range(100000)|unique|length }}", kExhausted, kSteps},
      {"printing_deep_list_of_long_string",
       "{% set ns = namespace(x='x' * 10000000) %}{% for i in range(250) %}{% set ns.x = [ns.x] %}{% endfor %}"
       "{{ ns.x|string|length }}",
       kOk, "10000502"},
      {"substring_search", "{{ (('a' * 100000) ~ 'b') in ('a' * 20000000) }}", kOk, "False"},
      {"substring_count", "{{ ('a' * 20000000).count(('a' * 100000) ~ 'b') }}", kOk, "0"},
      {"substring_rfind", "{{ ('a' * 20000000).rfind(('a' * 100000) ~ 'b') }}", kOk, "-1"},
      {"split_on_long_separator", "{{ ('a' * 20000000).split(('a' * 100000) ~ 'b')|length }}", kOk, "1"},
      {"strip_long_chars", "{{ ('x' * 10000000 ~ 'y').strip('z' * 5000000 ~ 'x')|length }}", kOk, "1"},
      {"startswith_many_long_prefixes", "{{ ('a' * 20000000).startswith(['a' * 60000000] * 100000) }}", kExhausted,
       kSteps},
      {"attribute_path_through_a_namespace",
       "{% set ns = namespace() %}{% set ns.a = ns %}"
       "{{ ([ns] * 100000)|map(attribute='a.' * 500000 ~ 'a')|list|length }}",
       kExhausted, kSteps},
      {"loops_over_ranges", "{% for i in range(100000) %}{% for j in range(100000) %}{{ loop.index }}{% endfor %}"
                            "{% endfor %}",
       kExhausted, kSteps},
      {"attribute_index_past_int64", "{{ [[1]]|map(attribute='99999999999999999999')|list|length }}", kOk, "1"},
      // The parser: left-deep chains build trees as deep as nested brackets do.
      {"chain_attributes", "{{ x" + Repeat(".a", 100000) + " }}", kInvalid, kNesting},
      {"chain_items", "{{ x" + Repeat("[0]", 100000) + " }}", kInvalid, kNesting},
      {"chain_calls", "{{ x" + Repeat("()", 100000) + " }}", kInvalid, kNesting},
      {"chain_filters", "{{ x" + Repeat("|string", 100000) + " }}", kInvalid, kNesting},
      {"chain_tests", "{{ x" + Repeat(" is defined", 50000) + " }}", kInvalid, kNesting},
      {"chain_plus", "{{ 1" + Repeat(" + 1", 100000) + " }}", kInvalid, kNesting},
      {"chain_concat", "{{ 'a'" + Repeat(" ~ 'a'", 100000) + " }}", kInvalid, kNesting},
      {"chain_power", "{{ 1" + Repeat(" ** 1", 100000) + " }}", kInvalid, kNesting},
      {"chain_or", "{{ 1" + Repeat(" or 1", 100000) + " }}", kInvalid, kNesting},
      {"chain_compare", "{{ 1" + Repeat(" == 1", 100000) + " }}", kInvalid, kNesting},
      {"chain_conditions", "{{ 1" + Repeat(" if 1", 100000) + " }}", kInvalid, kNesting},
      {"parentheses", "{{ " + Repeat("(", 100000) + "1" + Repeat(")", 100000) + " }}", kInvalid, kNesting},
      {"brackets", "{{ " + Repeat("[", 100000) + Repeat("]", 100000) + " }}", kInvalid, kNesting},
      {"braces", "{{ " + Repeat("{'a': ", 100000) + "1" + Repeat("}", 100000) + " }}", kInvalid, kNesting},
      {"calls_in_arguments", "{{ " + Repeat("f(", 100000) + Repeat(")", 100000) + " }}", kInvalid, kNesting},
      {"nots", "{{ " + Repeat("not ", 100000) + "1 }}", kInvalid, kNesting},
      {"minuses", "{{ " + Repeat("- ", 100000) + "1 }}", kInvalid, kNesting},
      {"blocks", Repeat("{% if true %}", 50000), kInvalid, kNesting},
      {"template_too_long", "{{ [" + Repeat("1,", 30000000) + "] }}", kInvalid, "longer than 1048576 bytes"},
      // Numbers: a float out of int64's range is an error, not undefined behaviour.
      {"int_of_huge_float", "{{ 1e300|int }}", kInvalid, "integer"},
      {"int_of_infinity", "{{ (1e308 * 10)|int }}", kInvalid, "integer"},
      {"int_of_huge_float_string", "{{ '1e300'|int }}", kInvalid, "integer"},
      // The conversation: a large JSON object is read in linear time; scanning it is charged.
      {"json_object_many_keys", "{{ messages[0].big|length }}", kOk, "300000", 300000},
      {"dict_of_many_keys", "{{ dict(messages[0].big)|length }}", kOk, "300000", 300000},
      {"lookup_in_many_keys",
       "{% for i in range(100000) %}{% if 'zz' in messages[0].big %}{% endif %}{% endfor %}", kExhausted, kSteps,
       300000},
  };
  // Within a parenthesis, a chain counts from the parenthesis' own depth: 60 levels of 150 deep chains.
  std::string mixed = "x";
  for (int i = 0; i < 60; ++i) mixed = "(" + mixed + Repeat(".a", 150) + ")";
  c.push_back({"chains_in_parentheses", "{{ " + mixed + " }}", kInvalid, kNesting});
  return c;
}

absl::Duration ThreadCpuTime() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return absl::DurationFromTimespec(t);
}

// The peak resident memory (KiB) since the last ResetPeakMemory, or -1 where Linux does not say.
int64_t PeakMemoryKiB() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

bool ResetPeakMemory() {
  malloc_trim(0);
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return clear.good();
}

class JinjaLimitsTest : public ::testing::TestWithParam<Case> {};

TEST_P(JinjaLimitsTest, EndsWithinBoundsNamingTheLimit) {
  const Case& c = GetParam();
  const nlohmann::ordered_json messages = Messages(c.big_keys, c.content_bytes);
  const bool measure_memory = ResetPeakMemory();
  const absl::Time start = absl::Now();
  const absl::Duration cpu_start = ThreadCpuTime();
  absl::StatusOr<std::string> r;
  auto t = ChatTemplate::Parse(c.source);
  if (!t.ok()) {
    r = t.status();
  } else {
    r = t->Render(messages, /*add_generation_prompt=*/false);
  }
  const absl::Duration cpu = ThreadCpuTime() - cpu_start, took = absl::Now() - start;
  EXPECT_LT(cpu, kCpuBound) << c.name;
  EXPECT_LT(took, kWallBound) << c.name;
  if (measure_memory) {
    EXPECT_LT(PeakMemoryKiB(), kMemoryBoundKiB) << c.name;
  }
  if (c.code == kOk) {
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status();
    EXPECT_EQ(*r, c.expected) << c.name;
    return;
  }
  ASSERT_FALSE(r.ok()) << c.name << ": rendered " << r->size() << " bytes";
  EXPECT_EQ(r.status().code(), c.code) << c.name << ": " << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(c.expected)) << c.name << ": " << r.status();
}

INSTANTIATE_TEST_SUITE_P(Cases, JinjaLimitsTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace tessera::formats::chat
