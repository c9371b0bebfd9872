#include "parallel/layers/weight_grad_store.h"

#include <atomic>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

namespace tessera::parallel {
namespace {

std::atomic<bool> g_splitting{false};
std::atomic<WeightGradStore*> g_current{nullptr};

}  // namespace

void WeightGradStore::set_splitting(bool on) { g_splitting = on; }
bool WeightGradStore::splitting() { return g_splitting; }
WeightGradStore* WeightGradStore::current() { return g_current; }

WeightGradStore::Scope::Scope(WeightGradStore* store) : previous_(g_current.exchange(store)) {}
WeightGradStore::Scope::~Scope() { g_current = previous_; }

void WeightGradStore::Count(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return;
  const int64_t bytes = static_cast<int64_t>(t.storage().nbytes());
  if (counted_.emplace(t.storage().unsafeGetStorageImpl(), bytes).second) held_ += bytes;
}

void WeightGradStore::Defer(at::Tensor root, std::function<at::Tensor()> compute, const std::vector<at::Tensor>& kept) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const at::Tensor& t : kept) Count(t);
  deferred_.emplace_back(std::move(root), std::move(compute));
}

void WeightGradStore::Add(at::Tensor root, at::Tensor grad) {
  std::lock_guard<std::mutex> lock(mu_);
  Count(grad);
  computed_.emplace_back(std::move(root), std::move(grad));
}

int64_t WeightGradStore::held_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

void WeightGradStore::Absorb(WeightGradStore& other) {
  if (&other == this) return;
  std::scoped_lock lock(mu_, other.mu_);
  for (auto& d : other.deferred_) deferred_.push_back(std::move(d));
  for (auto& c : other.computed_) computed_.push_back(std::move(c));
  for (const auto& [key, bytes] : other.counted_) {
    if (counted_.emplace(key, bytes).second) held_ += bytes;
  }
  other.deferred_.clear();
  other.computed_.clear();
  other.counted_.clear();
  other.held_ = 0;
}

bool WeightGradStore::empty() {
  std::lock_guard<std::mutex> lock(mu_);
  return deferred_.empty() && computed_.empty();
}

void WeightGradStore::Run() {
  std::vector<std::pair<at::Tensor, std::function<at::Tensor()>>> deferred;
  std::vector<std::pair<at::Tensor, at::Tensor>> computed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    deferred.swap(deferred_);
    computed.swap(computed_);
    counted_.clear();
    held_ = 0;
  }
  std::vector<at::Tensor> roots, grads;
  roots.reserve(deferred.size() + computed.size());
  grads.reserve(roots.capacity());
  {
    at::NoGradGuard no_grad;  // The products themselves are not differentiated.
    for (auto& [root, compute] : deferred) {
      roots.push_back(std::move(root));
      grads.push_back(compute());
    }
  }
  for (auto& [root, grad] : computed) {
    roots.push_back(std::move(root));
    grads.push_back(std::move(grad));
  }
  // One pass: a parameter reached from several roots receives their sum once.
  if (!roots.empty()) torch::autograd::backward(roots, grads);
}

at::Tensor SplitBackward(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& grads,
                         const at::Tensor& input, WeightGradStore* store) {
  WeightGradStore::Scope scope(store);
  std::vector<at::Tensor> inputs;
  const bool with_input = input.defined() && input.requires_grad();
  if (with_input) inputs.push_back(input);
  for (const at::Tensor& p : store->params()) {
    if (p.requires_grad()) inputs.push_back(p);
  }
  if (inputs.empty()) return at::Tensor();
  std::vector<at::Tensor> got = torch::autograd::grad(outputs, inputs, grads, /*retain_graph=*/false,
                                                      /*create_graph=*/false, /*allow_unused=*/true);
  const size_t first = with_input ? 1 : 0;
  for (size_t k = first; k < got.size(); ++k) {
    if (got[k].defined()) store->Add(inputs[k], std::move(got[k]));
  }
  return with_input ? got[0] : at::Tensor();
}

}  // namespace tessera::parallel
