// Merges a YAML tree into a protobuf message field by field, by reflection, so that the proto is the
// schema: unknown keys, wrong types and unknown enum names are errors naming the field path.
#ifndef TESSERA_SPEC_YAML_TO_PROTO_H_
#define TESSERA_SPEC_YAML_TO_PROTO_H_

#include <string>
#include <vector>

#include "spec/spec_error.h"
#include "google/protobuf/message.h"
#include "yaml-cpp/yaml.h"

namespace tessera::spec {

// Sets every field named in `node` (a mapping) on `msg`; fields not named keep their values. A
// repeated field named in `node` is replaced as a whole. Enum values are written in lower case without
// the enum's prefix ("cosine" for LR_SCHEDULE_COSINE, "2.5d" for TP_MODE_2P5D); the full proto name
// is accepted too, so protobuf's JSON form of a message (valid YAML) merges back losslessly. Problems are appended
// to `errors` with paths prefixed by `path` ("" at the top); merging continues past them.
void MergeYaml(const YAML::Node& node, const std::string& path, google::protobuf::Message* msg,
               std::vector<SpecError>* errors);

// "unknown field KEY" for a key `desc` has no field of, with the nearest name when one is close.
std::string UnknownFieldMessage(const google::protobuf::Descriptor* desc, const std::string& key);

// The YAML spelling of an enum value ("TP_MODE_2P5D" -> "2.5d"); "" for the UNSPECIFIED value.
std::string EnumYamlName(const google::protobuf::EnumValueDescriptor* value);

}  // namespace tessera::spec

#endif  // TESSERA_SPEC_YAML_TO_PROTO_H_
