// The global functions of a chat template: Jinja's range, namespace and dict, and transformers'
// raise_exception and strftime_now.
#include <ctime>

#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_builtins.h"
#include "formats/chat/jinja_builtins_internal.h"

namespace tessera::chat {

namespace {

using Kind = Value::Kind;

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox: MAX_RANGE.

}  // namespace

void AddGlobals(Dict* g) {
  g->Set("range", Value::Callable([](const Args& a) -> absl::StatusOr<Value> {
    if (a.positional.empty() || a.positional.size() > 3) return Err("range expects 1 to 3 integer arguments");
    for (const Value& v : a.positional) {
      if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) return Err("range: arguments must be integers");
    }
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].AsInt();
    } else {
      start = a.positional[0].AsInt();
      stop = a.positional[1].AsInt();
      if (a.positional.size() == 3) step = a.positional[2].AsInt();
    }
    if (step == 0) return Err("range: step must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(out.size()) >= kMaxRange) {
        return Err(absl::StrCat("range too big: the sandbox refuses ranges larger than ", kMaxRange));
      }
      out.push_back(Value::Int(i));
    }
    return Value::List(std::move(out));
  }));
  auto dict_like = [](bool ns) {
    return Value::Callable([ns](const Args& a) -> absl::StatusOr<Value> {
      Value d = ns ? Value::Namespace() : Value::NewDict();
      for (const Value& p : a.positional) {
        if (!p.IsDict()) return Err(absl::StrCat(ns ? "namespace" : "dict", ": a positional argument must be a mapping"));
        for (const auto& [k, v] : p.AsDict().items) d.AsDict().Set(k, v);
      }
      for (const auto& [k, v] : a.keyword) d.AsDict().Set(k, v);
      return d;
    });
  };
  g->Set("namespace", dict_like(true));
  g->Set("dict", dict_like(false));
  g->Set("raise_exception", Value::Callable([](const Args& a) -> absl::StatusOr<Value> {
    const std::string message = a.Get(0, "message").value_or(Value::String("")).Str();
    return absl::FailedPreconditionError(absl::StrCat("the chat template raised an exception: ", message));
  }));
  g->Set("strftime_now", Value::Callable([](const Args& a) -> absl::StatusOr<Value> {
    const std::string format = a.Get(0, "format").value_or(Value::String("")).Str();
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
    return Value::String(std::string(buf, n));
  }));
}


}  // namespace tessera::chat
