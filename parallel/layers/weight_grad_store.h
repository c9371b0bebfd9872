// WeightGradStore: the weight-gradient half of a backward pass split in two, as zero-bubble pipeline
// schedules run it (layout/schedule.h): B computes the gradient of a chunk's input — what the previous
// stage waits for — and W, run later, the parameters' gradients.
//
// While a store is current (Scope), a backward pass started by SplitBackward is B:
//   - every Linear (linear.h) built while splitting() was on computes its input's and bias's gradients
//     and leaves its weight-gradient GEMM (x-transpose times the output's gradient) to the store, which
//     keeps both operands alive until W;
//   - every other parameter gradient (norms, embeddings, biases, grid tp products) is computed in B
//     and handed to the store instead of being accumulated.
// Run() is W: it computes the deferred products and accumulates every gradient into the parameters'
// .grad with one autograd pass from the parameters (or the tensors the layers made of them), so each
// parameter's gradient accumulator — and the hooks on it (dp buckets, ZeRO) — fires once per
// micro-batch, as in a backward pass that is not split. The arithmetic is the unsplit backward's; only
// its order changes.
//
// One current store per process (the autograd engine runs CUDA backward functions on its own threads,
// so it is not thread-local); the deferred work may be added from those threads (Add/Defer lock).
#ifndef TESSERA_PARALLEL_LAYERS_WEIGHT_GRAD_STORE_H_
#define TESSERA_PARALLEL_LAYERS_WEIGHT_GRAD_STORE_H_

#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace tessera::parallel {

class WeightGradStore {
 public:
  // Process-wide: while on, Linear builds a backward that can be split (at no cost when no store is
  // current at backward time: it then computes the weight gradient at once).
  static void set_splitting(bool on);
  static bool splitting();
  // The store that backward passes running now hand their parameter gradients to; null: none.
  static WeightGradStore* current();

  // Makes `store` current for its lifetime (restores the previous one).
  class Scope {
   public:
    explicit Scope(WeightGradStore* store);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WeightGradStore* previous_;
  };

  // A gradient for `root` (a parameter or a tensor made from one) to compute in W; `kept`: the
  // tensors `compute` holds until then (counted in held_bytes()).
  void Defer(at::Tensor root, std::function<at::Tensor()> compute, const std::vector<at::Tensor>& kept = {});
  // A gradient for `root` computed already, to accumulate in W.
  void Add(at::Tensor root, at::Tensor grad);
  // The memory this store keeps alive until W: the storages of the deferred products' operands and
  // of the computed gradients, each storage once (several linears reading one input count it once).
  int64_t held_bytes();
  // Parameters the backward passes of this store may reach: B asks autograd for their gradients.
  // Set by the owner before SplitBackward; kept across Run().
  void set_params(std::vector<at::Tensor> params) { params_ = std::move(params); }
  const std::vector<at::Tensor>& params() const { return params_; }

  // W: computes the deferred gradients and accumulates them and the added ones into .grad in one
  // autograd pass. Empties the store.
  void Run();
  // Moves `other`'s pending gradients into this store, so that one Run() accumulates both: a
  // parameter reached by both (a tied embedding used by two chunks of a rank) accumulates once.
  void Absorb(WeightGradStore& other);
  bool empty();

 private:
  std::mutex mu_;
  std::vector<std::pair<at::Tensor, std::function<at::Tensor()>>> deferred_;
  std::vector<std::pair<at::Tensor, at::Tensor>> computed_;
  std::vector<at::Tensor> params_;
  std::map<const void*, int64_t> counted_;  // Storages counted in held_, with their bytes.
  int64_t held_ = 0;
  void Count(const at::Tensor& t);  // mu_ held.
};

// B: back-propagates `grads` from `outputs` with `store` current, returning the gradient of `input`
// (undefined when `input` is undefined or gets none) and handing the gradients of store->params()
// to the store. The graph is freed as in a plain backward.
at::Tensor SplitBackward(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& grads,
                         const at::Tensor& input, WeightGradStore* store);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_LAYERS_WEIGHT_GRAD_STORE_H_
