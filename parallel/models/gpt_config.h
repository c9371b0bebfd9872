// Size of a GPT (no torch, so option structs can include it).
#ifndef TESSERA_PARALLEL_MODELS_GPT_CONFIG_H_
#define TESSERA_PARALLEL_MODELS_GPT_CONFIG_H_

namespace tessera::parallel {

struct GptConfig {
  int layers = 4;
  int hidden = 256;
  int heads = 4;
  int vocab = 256;
  int seq_len = 128;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_GPT_CONFIG_H_
