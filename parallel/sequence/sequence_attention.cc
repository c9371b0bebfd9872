#include "parallel/sequence/sequence_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/autograd_pointer.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace tessera::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Communicator* CommOf(AutogradContext* ctx) { return LoadPointer<Communicator>(ctx, "sp"); }

// Sends `t` to the next rank of the ring and receives the previous rank's into `into`; waits for both.
void Rotate(Communicator* sp, const at::Tensor& t, at::Tensor& into, int tag) {
  const int n = sp->size(), r = sp->rank();
  auto send = sp->SendAsync(t, (r + 1) % n, tag);
  auto recv = sp->RecvAsync(into, (r + n - 1) % n, tag);
  ThrowIfError(recv->Wait());
  ThrowIfError(send->Wait());
}

// Scores of this rank's queries against the keys of block `src`, with the causal mask on the own block
// (or `allowed` [B, 1, Tl, Tl] when defined: packed sequences).
at::Tensor Scores(const at::Tensor& q, const at::Tensor& k, double scale, bool diagonal, const at::Tensor& allowed) {
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)) * scale;
  if (allowed.defined()) return s.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  if (diagonal) {
    const int64_t t = q.size(-2);
    at::Tensor above = at::ones({t, t}, q.options().dtype(at::kBool)).triu(1);
    s = s.masked_fill(above, -std::numeric_limits<float>::infinity());
  }
  return s;
}

// Packed sequences: the keys of block `src` this rank's queries may see ([B, 1, Tl, Tl]); undefined
// without spans.
at::Tensor BlockMask(const at::Tensor& ends, int r, int src, int64_t Tl) {
  if (!ends.defined()) return {};
  return SpanCausalMask(ends, r * Tl, Tl, src * Tl, Tl);
}

// The fused CPU kernel's additive form of `allowed` (0 or −inf, in `like`'s dtype); none when undefined.
std::optional<at::Tensor> Additive(const at::Tensor& allowed, const at::Tensor& like) {
  if (!allowed.defined()) return std::nullopt;
  return at::zeros(allowed.sizes(), like.options()).masked_fill(allowed.logical_not(),
                                                                -std::numeric_limits<float>::infinity());
}

struct RingAttentionFn : public torch::autograd::Function<RingAttentionFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, Communicator* sp, const std::optional<at::Tensor>& ends_in) {
    const at::Tensor ends = ends_in.value_or(at::Tensor());
    const int n = sp->size(), r = sp->rank();
    const int64_t Tl = q_in.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q_in.size(-1)));
    // fp32 accumulation whatever the activation dtype.
    at::Tensor q = q_in.to(at::kFloat);
    at::Tensor kv = at::stack({k_in, v_in}).to(at::kFloat).contiguous();  // [2, B, H, Tl, d]
    at::Tensor out = at::zeros_like(q);
    at::Tensor row_max = at::full({q.size(0), q.size(1), q.size(2), 1}, -std::numeric_limits<float>::infinity(),
                                  q.options());
    // Explicit blocks: running maximum and denominator. CPU blocks (fused kernel): row_max is the
    // running log-sum-exp and denom is unused.
    at::Tensor denom = at::zeros_like(row_max);
    at::Tensor next = at::empty_like(kv);
    for (int j = 0; j < n; ++j) {
      const int src = (r - j + n) % n;
      std::unique_ptr<CommWork> send, recv;
      if (j + 1 < n) {  // The next block travels while this one is computed.
        send = sp->SendAsync(kv, (r + 1) % n, 0);
        recv = sp->RecvAsync(next, (r + n - 1) % n, 0);
      }
      const at::Tensor allowed = src <= r ? BlockMask(ends, r, src, Tl) : at::Tensor();
      if (src <= r && q.device().is_cpu()) {
        // The fused CPU attention kernel on this block (memory O(Tl), not O(Tl²)), merged by log-sum-exp.
        auto [o, l] = at::_scaled_dot_product_flash_attention_for_cpu(q, kv[0], kv[1], 0.0, src == r && !ends.defined(),
                                                                      Additive(allowed, q));
        at::Tensor lj = l.unsqueeze(-1);
        // A row with no key allowed in this block adds nothing (the kernel gives it output 0, lse 0);
        // the own block comes first and allows each row itself, so the running lse is finite here.
        if (allowed.defined()) lj = lj.masked_fill(allowed.any(-1, /*keepdim=*/true).logical_not(),
                                                   -std::numeric_limits<float>::infinity());
        at::Tensor merged = at::logaddexp(row_max, lj);  // row_max holds the running log-sum-exp here.
        out = out * at::exp(row_max - merged) + o * at::exp(lj - merged);
        row_max = merged;
      } else if (src <= r) {  // Later positions are fully masked.
        at::Tensor s = Scores(q, kv[0], scale, src == r, allowed);
        at::Tensor new_max = at::maximum(row_max, std::get<0>(s.max(-1, /*keepdim=*/true)));
        at::Tensor p = at::exp(s - new_max);
        at::Tensor alpha = at::exp(row_max - new_max);
        denom = denom * alpha + p.sum(-1, /*keepdim=*/true);
        out = out * alpha + at::matmul(p, kv[1]);
        row_max = new_max;
      }
      if (recv) {
        ThrowIfError(recv->Wait());
        ThrowIfError(send->Wait());
        std::swap(kv, next);
      }
    }
    at::Tensor lse;
    if (q.device().is_cpu()) {
      lse = row_max;
    } else {
      out = out / denom;
      lse = row_max + at::log(denom);
    }
    out = out.contiguous();
    SavePointer(ctx, "sp", sp);
    ctx->save_for_backward({q_in, k_in, v_in, out, lse});
    ctx->saved_data["ends"] = ends;
    return out.to(q_in.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator* sp = CommOf(ctx);
    const int n = sp->size(), r = sp->rank();
    auto saved = ctx->get_saved_variables();
    at::Tensor q = saved[0].to(at::kFloat);
    const at::ScalarType dtype = saved[0].scalar_type();
    const at::Tensor& out = saved[3];
    const at::Tensor& lse = saved[4];
    const at::Tensor ends = ctx->saved_data["ends"].toOptional<at::Tensor>().value_or(at::Tensor());
    const int64_t Tl = q.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    at::Tensor dout = grads[0].to(at::kFloat).contiguous();
    at::Tensor delta = (dout * out).sum(-1, /*keepdim=*/true);
    at::Tensor dq = at::zeros_like(q);
    // Keys, values and their gradient accumulators travel together: [k, v, dk, dv].
    at::Tensor block = at::cat({at::stack({saved[1], saved[2]}).to(at::kFloat), at::zeros({2, q.size(0), q.size(1),
                                                                                              q.size(2), q.size(3)},
                                                                                             q.options())})
                           .contiguous();
    at::Tensor next = at::empty_like(block);
    for (int j = 0; j < n; ++j) {
      const int src = (r - j + n) % n;
      const at::Tensor allowed = src <= r ? BlockMask(ends, r, src, Tl) : at::Tensor();
      if (src <= r && q.device().is_cpu()) {
        auto [dq_j, dk_j, dv_j] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, block[0], block[1], out, lse.squeeze(-1), 0.0, src == r && !ends.defined(), Additive(allowed, q));
        dq.add_(dq_j);
        block[2].add_(dk_j);
        block[3].add_(dv_j);
      } else if (src <= r) {
        at::Tensor k = block[0], v = block[1];
        at::Tensor p = at::exp(Scores(q, k, scale, src == r, allowed) - lse);
        block[3].add_(at::matmul(p.transpose(-2, -1), dout));
        at::Tensor ds = p * (at::matmul(dout, v.transpose(-2, -1)) - delta);
        dq.add_(at::matmul(ds, k) * scale);
        block[2].add_(at::matmul(ds.transpose(-2, -1), q) * scale);
      }
      // After n hops every block's gradients are back at the rank that owns it.
      Rotate(sp, block, next, 1);
      std::swap(block, next);
    }
    return {dq.to(dtype), block[2].to(dtype), block[3].to(dtype), at::Tensor(), at::Tensor()};
  }
};

// [B, H, Tl, d] split over the sequence → [B, H/n, n·Tl, d] split over the heads (forward), and back.
at::Tensor SeqToHeads(const at::Tensor& x, Communicator* sp) {
  const int64_t n = sp->size(), B = x.size(0), H = x.size(1), Tl = x.size(2), d = x.size(3);
  at::Tensor in = x.reshape({B, n, H / n, Tl, d}).permute({1, 0, 2, 3, 4}).contiguous();
  at::Tensor out = at::empty_like(in);
  ThrowIfError(sp->AllToAll(in, out));  // out[j]: head group `rank` of sequence block j.
  return out.permute({1, 2, 0, 3, 4}).reshape({B, H / n, n * Tl, d});
}

at::Tensor HeadsToSeq(const at::Tensor& y, Communicator* sp) {
  const int64_t n = sp->size(), B = y.size(0), Hs = y.size(1), T = y.size(2), d = y.size(3);
  at::Tensor in = y.reshape({B, Hs, n, T / n, d}).permute({2, 0, 1, 3, 4}).contiguous();
  at::Tensor out = at::empty_like(in);
  ThrowIfError(sp->AllToAll(in, out));  // out[i]: head group i of this rank's sequence block.
  return out.permute({1, 0, 2, 3, 4}).reshape({B, n * Hs, T / n, d});
}

struct SeqToHeadsFn : public torch::autograd::Function<SeqToHeadsFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* sp) {
    SavePointer(ctx, "sp", sp);
    return SeqToHeads(x, sp);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {HeadsToSeq(grads[0], CommOf(ctx)), at::Tensor()};
  }
};

struct HeadsToSeqFn : public torch::autograd::Function<HeadsToSeqFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, Communicator* sp) {
    SavePointer(ctx, "sp", sp);
    return HeadsToSeq(y, sp);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {SeqToHeads(grads[0], CommOf(ctx)), at::Tensor()};
  }
};

}  // namespace

at::Tensor PositionSpanEnds(const at::Tensor& positions) {
  const at::Tensor p = positions.to(at::kCPU, at::kLong).contiguous();
  const int64_t B = p.size(0), T = p.size(1);
  at::Tensor ends = at::empty({B, T}, at::kLong);
  const int64_t* pos = p.data_ptr<int64_t>();
  int64_t* end = ends.data_ptr<int64_t>();
  std::vector<int64_t> open;  // Indices whose end is not found yet; their positions strictly increase.
  for (int64_t b = 0; b < B; ++b) {
    open.clear();
    for (int64_t j = 0; j < T; ++j) {
      while (!open.empty() && pos[b * T + j] <= pos[b * T + open.back()]) {
        end[b * T + open.back()] = j;
        open.pop_back();
      }
      open.push_back(j);
    }
    for (int64_t k : open) end[b * T + k] = T;
  }
  return ends.to(positions.device());
}

at::Tensor SpanCausalMask(const at::Tensor& ends, int64_t q_first, int64_t Tq, int64_t k_first, int64_t Tk) {
  const at::TensorOptions longs = at::TensorOptions().dtype(at::kLong).device(ends.device());
  const at::Tensor q = at::arange(q_first, q_first + Tq, longs).view({1, Tq, 1});
  const at::Tensor k = at::arange(k_first, k_first + Tk, longs).view({1, 1, Tk});
  const at::Tensor end = ends.narrow(1, k_first, Tk).unsqueeze(1);  // [B, 1, Tk]
  return k.le(q).logical_and(q.lt(end)).unsqueeze(1);
}

at::Tensor RingSelfAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Communicator* sp,
                             const at::Tensor& ends) {
  // An undefined tensor may not be an autograd function's argument: none is passed as nullopt.
  return RingAttentionFn::apply(q, k, v, sp, ends.defined() ? std::optional<at::Tensor>(ends) : std::nullopt);
}

at::Tensor UlyssesSelfAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Communicator* sp,
                                const at::Tensor& ends) {
  at::Tensor qh = SeqToHeadsFn::apply(q, sp), kh = SeqToHeadsFn::apply(k, sp), vh = SeqToHeadsFn::apply(v, sp);
  at::Tensor y;
  if (ends.defined()) {
    const int64_t T = qh.size(2);
    y = at::scaled_dot_product_attention(qh, kh, vh, SpanCausalMask(ends, 0, T, 0, T).to(qh.device()), 0.0,
                                         /*is_causal=*/false);
  } else {
    y = at::scaled_dot_product_attention(qh, kh, vh, {}, 0.0, /*is_causal=*/true);
  }
  return HeadsToSeqFn::apply(y, sp);
}

}  // namespace tessera::parallel
