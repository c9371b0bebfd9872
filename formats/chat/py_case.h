// Python's str.upper(), lower(), title() and capitalize() for the scripts chat text is written in:
// ASCII, Latin-1, Latin Extended-A and Additional, Greek (final sigma included), Cyrillic, Armenian and
// fullwidth Latin; ß upper-cases to "SS". Other characters are left as they are (scripts without case,
// and the rare mappings outside these blocks).
#ifndef TESSERA_FORMATS_CHAT_PY_CASE_H_
#define TESSERA_FORMATS_CHAT_PY_CASE_H_

#include <string>
#include <string_view>

namespace tessera::chat {

std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);
// str.isupper() / str.islower(): some cased character, and none of the other case.
bool PyIsUpper(std::string_view s);
bool PyIsLower(std::string_view s);

}  // namespace tessera::chat

#endif  // TESSERA_FORMATS_CHAT_PY_CASE_H_
