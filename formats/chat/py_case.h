// Python's str over UTF-8, as chat templates use it: code points (an invalid byte counts as one),
// whitespace and strip; and str.upper(), lower(), title() and capitalize() for the scripts chat text is
// written in: ASCII, Latin-1, Latin Extended-A and Additional, Greek (final sigma included), Cyrillic,
// Armenian and fullwidth Latin; ß upper-cases to "SS". Other characters are left as they are (scripts
// without case, and the rare mappings outside these blocks).
#ifndef TESSERA_FORMATS_CHAT_PY_CASE_H_
#define TESSERA_FORMATS_CHAT_PY_CASE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::formats::chat {

// The code point at s[i] (UTF-8) and its length in *len; an invalid byte is itself (length 1).
uint32_t DecodeUtf8At(std::string_view s, size_t i, size_t* len);
void AppendUtf8(uint32_t cp, std::string* out);
// How many code points `s` has, and the byte where code point `index` starts (s.size() past the last).
size_t CountCodePoints(std::string_view s);
size_t CodePointStart(std::string_view s, size_t index);
// The code points of `s` as byte ranges [begin, end). The table (16 bytes a code point) is charged to the
// rendering's budget (jinja_budget.h) before it is made; empty once the budget is spent.
std::vector<std::pair<size_t, size_t>> CodePoints(std::string_view s);
// Python's str.isspace() for one code point (what strip() and the regex \s remove).
bool IsPySpace(uint32_t cp);
// `s` without leading / trailing Python whitespace (or, when `chars` is given, those characters).
std::string_view PyStrip(std::string_view s, bool left, bool right, const std::string* chars = nullptr);

std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);
// str.isupper() / str.islower(): some cased character, and none of the other case.
bool PyIsUpper(std::string_view s);
bool PyIsLower(std::string_view s);

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_PY_CASE_H_
