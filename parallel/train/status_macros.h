// TESSERA_RETURN_IF_ERROR(expr): returns the absl::Status `expr` from the enclosing function unless ok.
#ifndef TESSERA_PARALLEL_TRAIN_STATUS_MACROS_H_
#define TESSERA_PARALLEL_TRAIN_STATUS_MACROS_H_

#include "absl/status/status.h"

#define TESSERA_RETURN_IF_ERROR(expr) \
  do {                                \
    absl::Status _st = (expr);        \
    if (!_st.ok()) return _st;        \
  } while (0)

#endif  // TESSERA_PARALLEL_TRAIN_STATUS_MACROS_H_
