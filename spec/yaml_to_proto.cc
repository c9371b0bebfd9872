#include "spec/yaml_to_proto.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/descriptor.h"

namespace tessera::spec {
namespace {

using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

// Levenshtein distance, for "did you mean" hints on mistyped keys.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}


std::string EnumChoices(const google::protobuf::EnumDescriptor* desc) {
  std::vector<std::string> names;
  for (int i = 0; i < desc->value_count(); ++i) {
    std::string n = EnumYamlName(desc->value(i));
    if (!n.empty()) names.push_back(n);
  }
  return absl::StrJoin(names, " | ");
}

const EnumValueDescriptor* FindEnum(const google::protobuf::EnumDescriptor* desc,
                                    const std::string& text) {
  for (int i = 0; i < desc->value_count(); ++i) {
    std::string n = EnumYamlName(desc->value(i));
    // The short YAML name, or the full proto name (as protobuf's JSON form writes it — also of an
    // UNSPECIFIED value, which has no short name and means "the default"; validation decides).
    if ((!n.empty() && n == absl::AsciiStrToLower(text)) || text == desc->value(i)->name()) {
      return desc->value(i);
    }
  }
  return nullptr;
}

bool ParseBool(const std::string& s, bool* out) {
  std::string l = absl::AsciiStrToLower(s);
  if (l == "true" || l == "yes" || l == "on") return *out = true, true;
  if (l == "false" || l == "no" || l == "off") return *out = false, true;
  return false;
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return errno == 0 && end == s.c_str() + s.size();
}

// Sets one scalar (or appends one element of a repeated field). Returns "" or the problem.
std::string SetScalar(const YAML::Node& node, const FieldDescriptor* f, Message* msg) {
  if (!node.IsScalar()) return "expected a single value";
  const std::string s = node.Scalar();
  const Reflection* r = msg->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(s, &v)) return absl::StrCat(Quote(s), " is not an integer");
      rep ? r->AddInt32(msg, f, v) : r->SetInt32(msg, f, v);
      return "";
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!absl::SimpleAtoi(s, &v)) return absl::StrCat(Quote(s), " is not an integer");
      rep ? r->AddInt64(msg, f, v) : r->SetInt64(msg, f, v);
      return "";
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!absl::SimpleAtoi(s, &v)) return absl::StrCat(Quote(s), " is not a non-negative integer");
      rep ? r->AddUInt32(msg, f, v) : r->SetUInt32(msg, f, v);
      return "";
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!absl::SimpleAtoi(s, &v)) return absl::StrCat(Quote(s), " is not a non-negative integer");
      rep ? r->AddUInt64(msg, f, v) : r->SetUInt64(msg, f, v);
      return "";
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      double v;
      if (!ParseDouble(s, &v)) return absl::StrCat(Quote(s), " is not a number");
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
        rep ? r->AddDouble(msg, f, v) : r->SetDouble(msg, f, v);
      } else {
        rep ? r->AddFloat(msg, f, static_cast<float>(v)) : r->SetFloat(msg, f, static_cast<float>(v));
      }
      return "";
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (!ParseBool(s, &v)) return absl::StrCat(Quote(s), " is not true or false");
      rep ? r->AddBool(msg, f, v) : r->SetBool(msg, f, v);
      return "";
    }
    case FieldDescriptor::CPPTYPE_STRING:
      rep ? r->AddString(msg, f, s) : r->SetString(msg, f, s);
      return "";
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumValueDescriptor* v = FindEnum(f->enum_type(), s);
      if (v == nullptr) {
        return absl::StrCat(Quote(s), " is not one of ", EnumChoices(f->enum_type()));
      }
      rep ? r->AddEnum(msg, f, v) : r->SetEnum(msg, f, v);
      return "";
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return "unsupported field type";
}

}  // namespace

std::string UnknownFieldMessage(const google::protobuf::Descriptor* desc, const std::string& key) {
  std::string best;
  size_t best_distance = 3;  // Only suggest names at most two edits away.
  std::vector<std::string> names;
  for (int i = 0; i < desc->field_count(); ++i) {
    const std::string& name = desc->field(i)->name();
    names.push_back(name);
    size_t d = EditDistance(key, name);
    if (d < best_distance) best_distance = d, best = name;
  }
  if (!best.empty()) return absl::StrCat("unknown field (did you mean ", best, "?)");
  return absl::StrCat("unknown field (known: ", absl::StrJoin(names, ", "), ")");
}

std::string EnumYamlName(const EnumValueDescriptor* value) {
  if (value == nullptr) return "";  // A number no value of the enum has (proto3 enums are open).
  const std::string& name = value->name();
  const std::string& unspecified = value->type()->value(0)->name();
  std::string prefix = unspecified.substr(0, unspecified.size() - std::string("UNSPECIFIED").size());
  if (name == unspecified || name.rfind(prefix, 0) != 0) return "";
  std::string rest = absl::AsciiStrToLower(name.substr(prefix.size()));
  // A 'p' between two digits stands for a decimal point: 2P5D -> 2.5d.
  for (size_t i = 1; i + 1 < rest.size(); ++i) {
    if (rest[i] == 'p' && std::isdigit(rest[i - 1]) && std::isdigit(rest[i + 1])) rest[i] = '.';
  }
  return rest;
}

void MergeYaml(const YAML::Node& node, const std::string& path, Message* msg,
               std::vector<SpecError>* errors) {
  if (!node || node.IsNull()) return;
  if (!node.IsMap()) {
    errors->push_back({path, "expected a mapping of field: value"});
    return;
  }
  const google::protobuf::Descriptor* desc = msg->GetDescriptor();
  const Reflection* r = msg->GetReflection();
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      errors->push_back({path, "a key is not a plain name"});
      continue;
    }
    const std::string key = kv.first.Scalar();
    const std::string field_path = Join(path, key);
    const FieldDescriptor* f = desc->FindFieldByName(key);
    if (f == nullptr) {
      errors->push_back({field_path, UnknownFieldMessage(desc, key)});
      continue;
    }
    const YAML::Node& value = kv.second;
    if (f->is_repeated()) {
      if (!value.IsSequence()) {
        errors->push_back({field_path, "expected a list, e.g. [0.9, 0.95]"});
        continue;
      }
      r->ClearField(msg, f);
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {  // A list of sections: data.blend.
        for (size_t i = 0; i < value.size(); ++i) MergeYaml(value[i], absl::StrCat(field_path, "[", i, "]"), r->AddMessage(msg, f), errors);
        continue;
      }
      for (size_t i = 0; i < value.size(); ++i) {
        std::string problem = SetScalar(value[i], f, msg);
        if (!problem.empty()) errors->push_back({absl::StrCat(field_path, "[", i, "]"), problem});
      }
      continue;
    }
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* sub = r->MutableMessage(msg, f);
      // `section: auto` stands for `section: {auto_layout: true}` where the section has that field
      // (parallel: auto).
      const FieldDescriptor* auto_field = sub->GetDescriptor()->FindFieldByName("auto_layout");
      if (auto_field != nullptr && value.IsScalar() && absl::AsciiStrToLower(value.Scalar()) == "auto") {
        sub->GetReflection()->SetBool(sub, auto_field, true);
        continue;
      }
      MergeYaml(value, field_path, sub, errors);
      continue;
    }
    if (value.IsNull()) {
      errors->push_back({field_path, "missing value"});
      continue;
    }
    std::string problem = SetScalar(value, f, msg);
    if (!problem.empty()) errors->push_back({field_path, problem});
  }
}

}  // namespace tessera::spec
