// Oniguruma patterns (what a transformers tokenizer.json's Split pre-tokenizer carries, and what the
// `tokenizers` library runs) rewritten for PCRE2, so that they split text at the same places.
//
// Syntax is shared but the Unicode tables are not: the two libraries carry different Unicode versions,
// and Oniguruma's \s is a fixed list. The rewrite replaces \s and \S by Oniguruma's list, and adds to
// \p{L} and \p{N} the code points Oniguruma has and PCRE2 lacks (onig_unicode_classes.inc, derived by
// tools/unicode/derive_onig_classes.py from both libraries). Constructs whose meaning differs and
// that no known tokenizer uses are refused: \h and \H (a hex digit in Oniguruma), nested classes and
// `&&`, POSIX brackets, \S / \P{..} inside a class. Other escapes and \p{..} pass through unchanged.
#ifndef TESSERA_FORMATS_DATA_ONIG_PATTERN_H_
#define TESSERA_FORMATS_DATA_ONIG_PATTERN_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessera::formats::data {

absl::StatusOr<std::string> OnigToPcre2(std::string_view pattern);

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_ONIG_PATTERN_H_
