#include "spec/paths.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "spec/limits.h"

namespace tessera::spec {
namespace {

// The directory an output of `owner` must lie in.
std::string OutputBase(const PathRoots& roots, const std::string& owner) {
  return owner.empty() ? roots.output : absl::StrCat(roots.output, "/", owner);
}

// realpath() of `path` or of its deepest existing ancestor, with the part that does not exist yet
// appended unchanged; nullopt when nothing resolves or a component is a dangling symbolic link (it
// would be followed when the file is created).
std::optional<std::string> ResolveExisting(const std::string& path) {
  std::string head = path, tail;
  while (true) {
    char buf[PATH_MAX];
    if (realpath(head.c_str(), buf) != nullptr) {
      const std::string real(buf);
      return real == "/" && !tail.empty() ? tail : real + tail;
    }
    struct stat st {};
    if (errno != ENOENT || lstat(head.c_str(), &st) == 0 || head == "/") return std::nullopt;
    const size_t slash = head.rfind('/');
    tail = head.substr(slash) + tail;
    head = slash == 0 ? "/" : head.substr(0, slash);
  }
}

}  // namespace

std::vector<SpecError> CheckPathShape(const std::string& field, const std::string& path) {
  auto fail = [&](std::string why) { return std::vector<SpecError>{{field, std::move(why)}}; };
  const std::string shown = Quote(path, 512);
  if (path.size() > limits::kMaxPathBytes) return fail(absl::StrCat("is longer than ", limits::kMaxPathBytes, " bytes"));
  if (const size_t nul = path.find('\0'); nul != std::string::npos) {
    return fail(absl::StrCat("contains a NUL byte at offset ", nul));
  }
  if (path.empty() || path[0] != '/') return fail(absl::StrCat(shown, " must be an absolute path"));
  if (path.size() > 1 && path.back() == '/') return fail(absl::StrCat(shown, " must not end with '/'"));
  for (absl::string_view part : absl::StrSplit(absl::string_view(path).substr(1), '/')) {
    if (part == "..") return fail(absl::StrCat(shown, " must not contain '..'"));
    if (part == ".") return fail(absl::StrCat(shown, " must be normalised (a '.' component)"));
    if (part.empty() && path != "/") return fail(absl::StrCat(shown, " must be normalised (an empty component, '//')"));
  }
  return {};
}

bool PathWithin(const std::string& path, const std::string& root) {
  if (root == "/") return !path.empty() && path[0] == '/';
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

absl::StatusOr<PathRoots> ParsePathRoots(const std::string& data_roots, const std::string& output_root) {
  PathRoots roots;
  for (absl::string_view r : absl::StrSplit(data_roots, ',', absl::SkipEmpty())) {
    const std::string root(r);
    if (auto e = CheckPathShape("--data_roots", root); !e.empty()) return absl::InvalidArgumentError(ToStatus(e).message());
    roots.data.push_back(root);
  }
  if (!output_root.empty()) {
    if (auto e = CheckPathShape("--output_root", output_root); !e.empty()) {
      return absl::InvalidArgumentError(ToStatus(e).message());
    }
    roots.output = output_root;
  }
  return roots;
}

void MakePathsAbsolute(v1::JobSpec* s, const std::string& cwd) {
  auto absolute = [&](const std::string& path) {
    if (path.empty() || path[0] == '/') return path;
    std::string out = (std::filesystem::path(cwd) / path).lexically_normal().string();
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    return out;
  };
  v1::DataSpec* d = s->mutable_data();
  d->set_path(absolute(d->path()));
  d->set_valid_path(absolute(d->valid_path()));
  for (auto& src : *d->mutable_blend()) src.set_path(absolute(src.path()));
  s->mutable_model()->set_init_from(absolute(s->model().init_from()));
  s->mutable_model()->set_pretrained(absolute(s->model().pretrained()));
  if (s->model().has_lora()) s->mutable_model()->mutable_lora()->set_init_from(absolute(s->model().lora().init_from()));
  if (s->train().objective() == v1::OBJECTIVE_DPO && !s->dpo().reference().empty() &&
      s->dpo().reference() != "initial") {
    s->mutable_dpo()->set_reference(absolute(s->dpo().reference()));
  }
  for (auto& r : *s->mutable_grpo()->mutable_rewards()) {
    if (r.kind() == v1::REWARD_KIND_MODEL) r.set_path(absolute(r.path()));
  }
  s->set_output_dir(absolute(s->output_dir()));
  if (s->has_checkpoint()) s->mutable_checkpoint()->set_dir(absolute(s->checkpoint().dir()));
}

std::vector<std::pair<std::string, std::string>> InputPaths(const v1::JobSpec& s) {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](std::string field, const std::string& path) {
    if (!path.empty()) out.emplace_back(std::move(field), path);
  };
  add("data.path", s.data().path());
  add("data.valid_path", s.data().valid_path());
  for (int i = 0; i < s.data().blend_size(); ++i) add(absl::StrCat("data.blend[", i, "].path"), s.data().blend(i).path());
  add("model.init_from", s.model().init_from());
  add("model.pretrained", s.model().pretrained());
  add("model.lora.init_from", s.model().lora().init_from());
  if (s.train().objective() == v1::OBJECTIVE_DPO && s.dpo().reference() != "initial") {
    add("dpo.reference", s.dpo().reference());
  }
  for (int i = 0; i < s.grpo().rewards_size(); ++i) {
    if (s.grpo().rewards(i).kind() == v1::REWARD_KIND_MODEL) {
      add(absl::StrCat("grpo.rewards[", i, "].path"), s.grpo().rewards(i).path());
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> OutputPaths(const v1::JobSpec& s) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!s.output_dir().empty()) out.emplace_back("output_dir", s.output_dir());
  if (!s.checkpoint().dir().empty()) out.emplace_back("checkpoint.dir", s.checkpoint().dir());
  return out;
}

std::vector<SpecError> CheckJobPaths(const v1::JobSpec& spec, const PathRoots& roots, const std::string& owner) {
  std::vector<SpecError> errors;
  for (const auto& input : InputPaths(spec)) {
    const std::string& field = input.first;
    const std::string& path = input.second;  // Named, not a structured binding: a lambda captures it.
    auto shape = CheckPathShape(field, path);
    if (!shape.empty()) {
      errors.insert(errors.end(), shape.begin(), shape.end());
    } else if (!roots.data.empty() &&
               std::none_of(roots.data.begin(), roots.data.end(), [&](const std::string& r) { return PathWithin(path, r); })) {
      errors.push_back({field, absl::StrCat(Quote(path, 512), " is outside the data roots (", absl::StrJoin(roots.data, ", "), ")")});
    }
  }
  const std::string base = OutputBase(roots, owner);
  for (const auto& [field, path] : OutputPaths(spec)) {
    auto shape = CheckPathShape(field, path);
    if (!shape.empty()) {
      errors.insert(errors.end(), shape.begin(), shape.end());
    } else if (!roots.output.empty() && (!PathWithin(path, base) || path == base)) {
      errors.push_back({field, absl::StrCat(Quote(path, 512), " must be a directory inside ", base,
                                            owner.empty() ? "" : " (the output root's directory of user " + owner + ")")});
    }
  }
  return errors;
}

std::vector<SpecError> ConfineJobPaths(const v1::JobSpec& spec, const PathRoots& roots, const std::string& owner) {
  if (roots.empty()) return {};
  std::vector<SpecError> errors = CheckJobPaths(spec, roots, owner);
  // Symbolic links are resolved only for paths whose strings passed.
  return errors.empty() ? CheckResolvedPaths(spec, roots, owner) : errors;
}

std::vector<SpecError> CheckResolvedPaths(const v1::JobSpec& spec, const PathRoots& roots, const std::string& owner) {
  std::vector<SpecError> errors;
  auto resolved_roots = [](const std::vector<std::string>& rs) {
    std::vector<std::string> out;
    for (const std::string& r : rs) {
      if (auto x = ResolveExisting(r)) out.push_back(*x);
    }
    return out;
  };
  auto check = [&](const std::string& field, const std::string& path, const std::vector<std::string>& rs) {
    const std::optional<std::string> real = ResolveExisting(path);
    if (!real || std::none_of(rs.begin(), rs.end(), [&](const std::string& r) { return PathWithin(*real, r); })) {
      errors.push_back({field, absl::StrCat(Quote(path, 512), " leads outside its root through a symbolic link",
                                            real ? absl::StrCat(" (to ", Quote(*real, 512), ")") : "")});
    }
  };
  if (!roots.data.empty()) {
    const std::vector<std::string> rs = resolved_roots(roots.data);
    for (const auto& [field, path] : InputPaths(spec)) check(field, path, rs);
  }
  if (!roots.output.empty()) {
    const std::vector<std::string> rs = resolved_roots({OutputBase(roots, owner)});
    for (const auto& [field, path] : OutputPaths(spec)) check(field, path, rs);
  }
  return errors;
}

}  // namespace tessera::spec
