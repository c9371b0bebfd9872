// What an autograd Function's backward needs besides tensors — a communicator, the model, the fused
// kernels — kept in AutogradContext::saved_data, which holds IValues only. A non-owning pointer goes in
// as a capsule holding it with its type, and comes back checked by that type: no pointer travels as an
// integer, and asking for the wrong type is an error, not undefined behaviour. Shared by kernels/ and
// parallel/ (the lowest layer that has LibTorch).
//
// The pointee must outlive the backward pass (communicators and the model do: they live as long as
// the Trainer).
#ifndef TESSERA_KERNELS_AUTOGRAD_POINTER_H_
#define TESSERA_KERNELS_AUTOGRAD_POINTER_H_

#include <string>
#include <typeinfo>

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

namespace tessera {

template <typename T>
struct AutogradPointer : torch::CustomClassHolder {
  explicit AutogradPointer(T* p) : pointer(p) {}
  T* pointer;
};

// saved_data[key] = `pointer`.
template <typename T>
void SavePointer(torch::autograd::AutogradContext* ctx, const std::string& key, T* pointer) {
  ctx->saved_data[key] = c10::IValue::make_capsule(c10::make_intrusive<AutogradPointer<T>>(pointer));
}

// The pointer SavePointer<T> stored under `key`; throws (c10::Error) when there is none of type T.
template <typename T>
T* LoadPointer(torch::autograd::AutogradContext* ctx, const std::string& key) {
  auto it = ctx->saved_data.find(key);
  TORCH_CHECK(it != ctx->saved_data.end() && it->second.isCapsule(), "autograd: no pointer saved as ", key);
  auto* holder = dynamic_cast<AutogradPointer<T>*>(it->second.toCapsule().get());
  TORCH_CHECK(holder != nullptr, "autograd: the pointer saved as ", key, " is not a ", typeid(T).name());
  return holder->pointer;
}

}  // namespace tessera

#endif  // TESSERA_KERNELS_AUTOGRAD_POINTER_H_
