// Unicode canonical composition (NFC), as the `tokenizers` library's NFC normalizer applies it (the
// normalizer of Qwen2's tokenizer.json). The Unicode data comes from that library
// (formats/data/nfc_tables.inc, derived and checked by tools/unicode/derive_nfc_tables.py).
//
// Algorithm (Unicode Standard Annex #15): full canonical decomposition (Hangul syllables by
// arithmetic), canonical ordering of each run of non-starters by combining class (stable), then
// canonical composition: each character joins the last starter when it is not blocked (no character
// between them of class 0 or of a class at least its own) and the pair has a primary composite.
#ifndef TESSERA_FORMATS_DATA_NFC_H_
#define TESSERA_FORMATS_DATA_NFC_H_

#include <string>
#include <string_view>

namespace tessera::formats::data {

// NFC of `utf8`, which must be valid UTF-8 (FirstInvalidUtf8; not checked again here). Text whose
// every character NFC leaves alone whatever its neighbours (ASCII, most letters of every script) is
// copied as it is without decomposing.
std::string Nfc(std::string_view utf8);

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_NFC_H_
