// Text into HTML, and the number formats the dashboard shows.
#ifndef TESSERA_COORDINATOR_UI_HTML_H_
#define TESSERA_COORDINATOR_UI_HTML_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::coordinator::ui {

// Escapes &, <, >, " and ' (safe in element text and in quoted attributes). What is not valid UTF-8
// (text::Utf8Lossy: U+FFFD per maximal ill-formed subpart) and control characters other than tab and
// newline become U+FFFD: a rank's log or a job's name is shown as text whatever it holds.
std::string Escape(std::string_view text);

// "3.142", "0.0001234", "1.2e+09": up to `digits` significant digits; "–" for a non-finite value.
std::string Number(double v, int digits = 4);
// Axis labels: "950", "30k", "1.5M", "2G"; "0.001" below 10,000.
std::string Compact(double v);
// "1 h 02 m", "3 m 05 s", "12 s" for an age or a duration in milliseconds.
std::string Duration(int64_t ms);

}  // namespace tessera::coordinator::ui

#endif  // TESSERA_COORDINATOR_UI_HTML_H_
