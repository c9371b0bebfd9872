// The tokenizer's fuzz property, shared by the libFuzzer target (tools/fuzz.sh tokenizer) and the
// deterministic random run in the test suite (tokenizer_fuzz_test.cc): for any bytes, Encode fails
// exactly when they are not UTF-8 (naming the first bad byte), and otherwise Decode gives the bytes
// back (byte-level BPE loses nothing when all 256 bytes are in the vocabulary).
#ifndef TESSERA_FORMATS_DATA_TOKENIZER_FUZZ_H_
#define TESSERA_FORMATS_DATA_TOKENIZER_FUZZ_H_

#include <string>
#include <string_view>

namespace tessera::formats::data {

// "" when the property holds for `input`, else what broke.
std::string CheckTokenizerOn(std::string_view input);

}  // namespace tessera::formats::data

#endif  // TESSERA_FORMATS_DATA_TOKENIZER_FUZZ_H_
