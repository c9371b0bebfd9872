// How the CLI prints a proto enum value: its name without the type's prefix ("JOB_STATE_RUNNING" →
// "RUNNING"). A number this CLI does not know (sent by a newer coordinator: proto3 enums are open,
// and the generated _Name() gives "" for it) prints as "UNKNOWN(n)", never an exception.
#ifndef TESSERA_CLIENT_ENUM_NAME_H_
#define TESSERA_CLIENT_ENUM_NAME_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace tessera::client {

inline std::string EnumName(const std::string& name, const std::string& prefix, int number) {
  if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) return name.substr(prefix.size());
  return absl::StrCat("UNKNOWN(", number, ")");
}

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_ENUM_NAME_H_
