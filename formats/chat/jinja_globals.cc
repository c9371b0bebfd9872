// The global functions of a chat template: Jinja's range, namespace and dict, and transformers'
// raise_exception and strftime_now.
#include <algorithm>
#include <ctime>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_builtins.h"
#include "formats/chat/jinja_builtins_internal.h"

namespace tessera::formats::chat {

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
    // Python's len(range): ceil(|stop - start| / |step|), in unsigned arithmetic (no overflow).
    const uint64_t span = step > 0 ? (stop > start ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) : 0)
                                   : (start > stop ? static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) : 0);
    const uint64_t stride = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
    const uint64_t n = span == 0 ? 0 : (span - 1) / stride + 1;
    if (n > static_cast<uint64_t>(kMaxRange)) {
      return Err(absl::StrCat("range too big: the sandbox refuses ranges larger than ", kMaxRange));
    }
    if (absl::Status s = SpendItems(n); !s.ok()) return s;
    std::vector<Value> out;
    out.reserve(n);
    for (uint64_t k = 0; k < n; ++k) {  // start + k * step, computed modulo 2^64: within int64 for k < n.
      out.push_back(Value::Int(static_cast<int64_t>(static_cast<uint64_t>(start) + k * static_cast<uint64_t>(step))));
    }
    return Value::List(std::move(out));
  }));
  auto dict_like = [](bool ns) {
    return Value::Callable([ns](const Args& a) -> absl::StatusOr<Value> {
      if (absl::Status s = SpendItems(1 + a.keyword.size()); !s.ok()) return s;  // It, and its entries.
      Value d = ns ? Value::Namespace() : Value::NewDict();
      Dict& out = d.AsDict();
      // Key → its place in `out`: a large mapping is copied in linear time.
      absl::flat_hash_map<std::string, size_t> index;
      auto set = [&](const std::string& k, const Value& v) {
        if (auto [it, added] = index.emplace(k, out.items.size()); !added) {
          out.items[it->second].second = v;
          out.depth = std::max(out.depth, 1 + v.depth());
        } else {
          out.Append(k, v);
        }
      };
      for (const Value& p : a.positional) {
        if (!p.IsDict()) return Err(absl::StrCat(ns ? "namespace" : "dict", ": a positional argument must be a mapping"));
        if (absl::Status s = SpendItems(p.AsDict().items.size()); !s.ok()) return s;
        for (const auto& [k, v] : p.AsDict().items) set(k, v);
      }
      for (const auto& [k, v] : a.keyword) set(k, v);
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


}  // namespace tessera::formats::chat
