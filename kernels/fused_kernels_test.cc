// Fused kernels: the LibTorch composites (the CPU fallback and the reference) against autograd of the
// plain ATen operations in double; the autograd wiring of the fused operations; the path selection;
// and, where a GPU is present, the CUDA kernels against the composites in fp32 and bf16 on fresh random
// inputs with poisoned outputs. Without a GPU the CUDA cases skip with a message.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>

#include "kernels/cpu_adam.h"
#include "kernels/fused_kernels.h"
#include "kernels/fused_ops.h"
#ifdef TESSERA_HAVE_CUDA
#include "kernels/cuda/launch.h"
#endif

namespace tessera::kernels {
namespace {

double RelErr(const at::Tensor& got, const at::Tensor& want) {
  at::Tensor g = got.to(at::kDouble).cpu(), w = want.to(at::kDouble).cpu();
  const double denom = w.norm().item<double>();
  return (g - w).norm().item<double>() / (denom > 0 ? denom : 1.0);
}

// Sizes that are not multiples of a warp or a vector width.
constexpr int64_t kRows = 13, kCols = 37, kSeq = 19;

TEST(CompositeKernelsTest, LayerNormMatchesAutogradInDouble) {
  at::manual_seed(1);
  at::Tensor x = at::randn({kRows, kCols}, at::kDouble).requires_grad_(true);
  at::Tensor w = at::randn({kCols}, at::kDouble).requires_grad_(true);
  at::Tensor b = at::randn({kCols}, at::kDouble).requires_grad_(true);
  at::Tensor dy = at::randn({kRows, kCols}, at::kDouble);
  at::Tensor y = at::layer_norm(x, {kCols}, w, b, 1e-5);
  y.backward(dy);
  // The composite computes in fp32: compare at fp32's resolution (relative error well under 1e-5).
  const FusedKernels& k = CompositeKernels();
  LayerNormResult r = k.LayerNormForward(x.detach().to(at::kFloat), w.detach().to(at::kFloat),
                                         b.detach().to(at::kFloat), 1e-5);
  EXPECT_LT(RelErr(r.y, y), 1e-6);
  LayerNormGrads g = k.LayerNormBackward(dy.to(at::kFloat), x.detach().to(at::kFloat), r.mean, r.rstd,
                                         w.detach().to(at::kFloat));
  EXPECT_LT(RelErr(g.dx, x.grad()), 1e-5);
  EXPECT_LT(RelErr(g.dweight, w.grad()), 1e-5);
  EXPECT_LT(RelErr(g.dbias, b.grad()), 1e-6);
}

TEST(CompositeKernelsTest, BiasGeluMatchesAutogradInDouble) {
  at::manual_seed(2);
  at::Tensor x = at::randn({kRows, kCols}, at::kDouble).requires_grad_(true);
  at::Tensor b = at::randn({kCols}, at::kDouble);
  at::Tensor dy = at::randn({kRows, kCols}, at::kDouble);
  at::Tensor y = at::gelu(x + b);
  y.backward(dy);
  const FusedKernels& k = CompositeKernels();
  EXPECT_LT(RelErr(k.BiasGeluForward(x.detach().to(at::kFloat), b.to(at::kFloat)), y), 1e-6);
  EXPECT_LT(RelErr(k.BiasGeluBackward(dy.to(at::kFloat), x.detach().to(at::kFloat), b.to(at::kFloat)), x.grad()),
            1e-6);
}

TEST(CompositeKernelsTest, CausalSoftmaxMatchesAutogradInDouble) {
  at::manual_seed(3);
  const double scale = 0.125;
  at::Tensor s = at::randn({3, kSeq, kSeq}, at::kDouble).requires_grad_(true);
  at::Tensor dy = at::randn({3, kSeq, kSeq}, at::kDouble);
  at::Tensor mask = at::ones({kSeq, kSeq}, at::kBool).triu(1);
  at::Tensor y = at::softmax((s * scale).masked_fill(mask, -INFINITY), -1);
  y.backward(dy);
  const FusedKernels& k = CompositeKernels();
  at::Tensor got = k.CausalSoftmaxForward(s.detach().to(at::kFloat), scale);
  EXPECT_LT(RelErr(got, y), 1e-6);
  EXPECT_EQ(got.masked_select(mask.expand_as(got)).abs().max().item<float>(), 0.0f);  // Masked part is 0.
  EXPECT_LT(RelErr(k.CausalSoftmaxBackward(dy.to(at::kFloat), got, scale), s.grad()), 1e-5);
}

TEST(CompositeKernelsTest, CrossEntropyMatchesAutogradInDouble) {
  at::manual_seed(7);
  at::Tensor x = (at::randn({kRows, kCols}, at::kDouble) * 4).requires_grad_(true);
  at::Tensor target = at::randint(kCols, {kRows}, at::kLong);
  at::Tensor dloss = at::randn({kRows}, at::kDouble);
  at::Tensor loss = at::cross_entropy_loss(x, target, {}, at::Reduction::None);
  loss.backward(dloss);
  const FusedKernels& k = CompositeKernels();
  at::Tensor xf = x.detach().to(at::kFloat);
  SoftmaxStats st = k.CrossEntropyForward(xf);
  at::Tensor lse = st.max + st.sum_exp.log();
  EXPECT_LT(RelErr(lse - xf.gather(1, target.unsqueeze(1)).squeeze(1), loss), 1e-6);
  // A target of −1 (in another vocabulary slice) contributes no one-hot term.
  at::Tensor t2 = target.clone();
  t2[0] = -1;
  at::Tensor want = x.grad().clone();
  want[0] = want[0] + at::one_hot(target[0], kCols).to(at::kDouble) * dloss[0];
  EXPECT_LT(RelErr(k.CrossEntropyBackward(xf, lse, t2, dloss.to(at::kFloat)), want), 1e-6);
}

TEST(CompositeKernelsTest, AdamWMatchesCpuAdamW) {
  at::manual_seed(4);
  AdamWStep step{1e-3, 0.9, 0.95, 1e-8, 0.1, 3};
  std::vector<at::Tensor> p, g, m, v;
  for (int64_t n : {1, 7, 1001}) {  // Not multiples of 8 or 16 lanes.
    p.push_back(at::randn({n}));
    g.push_back(at::randn({n}));
    m.push_back(at::randn({n}) * 0.1);
    v.push_back(at::rand({n}) * 0.01);
  }
  std::vector<at::Tensor> p2, m2, v2;
  for (size_t i = 0; i < p.size(); ++i) p2.push_back(p[i].clone()), m2.push_back(m[i].clone()), v2.push_back(v[i].clone());
  CompositeKernels().AdamW(p, g, m, v, step);
  for (size_t i = 0; i < p.size(); ++i) {
    CpuAdamW(p2[i].data_ptr<float>(), g[i].data_ptr<float>(), m2[i].data_ptr<float>(), v2[i].data_ptr<float>(),
             p2[i].numel(), step, Simd::kScalar, /*parallel=*/false);
    // Same formula, ATen ops vs one scalar pass: at most a few fp32 ulps apart.
    EXPECT_LT(RelErr(p[i], p2[i]), 1e-6) << i;
    EXPECT_LT(RelErr(m[i], m2[i]), 1e-6) << i;
    EXPECT_LT(RelErr(v[i], v2[i]), 1e-6) << i;
  }
}

// Both layouts come from one quantisation: data as QuantizeFp8Tensorwise gives it, data_t its transpose
// byte for byte, one scale.
TEST(CompositeKernelsTest, QuantizeFp8TransposedIsOneQuantisationInBothLayouts) {
  at::Tensor x = (at::randn({kRows, kCols}) * 5).to(at::kBFloat16);
  for (at::ScalarType f : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
    Fp8Transposed q = CompositeKernels().QuantizeFp8TensorwiseTransposed(x, f);
    auto [data, inv_scale] = CompositeKernels().QuantizeFp8Tensorwise(x, f);
    EXPECT_TRUE(at::equal(q.data.view(at::kByte), data.view(at::kByte)));
    ASSERT_EQ(q.data_t.sizes(), (std::vector<int64_t>{kCols, kRows}));
    EXPECT_TRUE(q.data_t.is_contiguous());
    EXPECT_TRUE(at::equal(q.data_t.view(at::kByte), data.t().contiguous().view(at::kByte)));
    EXPECT_TRUE(at::equal(q.inv_scale, inv_scale));
  }
  EXPECT_THROW(CompositeKernels().QuantizeFp8TensorwiseTransposed(x.flatten(), at::kFloat8_e4m3fn), c10::Error);
}

// The autograd functions over the composite give the gradients ATen's autograd gives.

TEST(FusedOpsTest, AutogradWiringMatchesAten) {
  at::manual_seed(5);
  const FusedKernels& k = CompositeKernels();
  at::Tensor x = at::randn({2, 5, kCols}).requires_grad_(true);
  at::Tensor w = at::randn({kCols}).requires_grad_(true);
  at::Tensor b = at::randn({kCols}).requires_grad_(true);
  at::Tensor dy = at::randn({2, 5, kCols});
  at::Tensor ours = BiasGeluWith(k, LayerNormWith(k, x, w, b, 1e-5), b);
  auto g1 = torch::autograd::grad({ours}, {x, w, b}, {dy});
  at::Tensor ref = at::gelu(at::layer_norm(x, {kCols}, w, b, 1e-5) + b);
  auto g2 = torch::autograd::grad({ref}, {x, w, b}, {dy});
  EXPECT_LT(RelErr(ours, ref), 1e-6);
  for (int i = 0; i < 3; ++i) EXPECT_LT(RelErr(g1[i], g2[i]), 1e-5) << i;

  at::Tensor s = at::randn({2, kSeq, kSeq}).requires_grad_(true);
  at::Tensor ds = at::randn({2, kSeq, kSeq});
  at::Tensor a = CausalSoftmaxWith(k, s, 0.3);
  at::Tensor a_ref = CausalSoftmax(s, 0.3, /*fused=*/false);
  EXPECT_LT(RelErr(a, a_ref), 1e-6);
  EXPECT_LT(RelErr(torch::autograd::grad({a}, {s}, {ds})[0], torch::autograd::grad({a_ref}, {s}, {ds})[0]), 1e-5);
}

// CPU tensors never take a fused path: results are bit-identical to the plain ATen operations.
TEST(FusedOpsTest, CpuFallsBackToAtenExactly) {
  at::manual_seed(6);
  at::Tensor x = at::randn({4, kCols});
  at::Tensor w = at::randn({kCols}), b = at::randn({kCols});
  EXPECT_EQ(SelectKernels(x, /*fused=*/true), nullptr);
  EXPECT_TRUE(at::equal(LayerNorm(x, w, b, 1e-5, true), at::layer_norm(x, {kCols}, w, b, 1e-5)));
  EXPECT_TRUE(at::equal(BiasGelu(x, b, true), at::gelu(x + b)));
}

// ---- CUDA kernels against the composites (need a GPU) ----

#ifdef TESSERA_HAVE_CUDA
// Built with a CUDA toolkit: the kernels registered themselves at start-up, GPU or not.
TEST(CudaKernelsRegistrationTest, RegisteredAtStartup) {
  ASSERT_NE(CudaKernels(), nullptr);
  EXPECT_STREQ(CudaKernels()->name(), "cuda");
}
#endif

bool HaveCuda() { return at::hasCUDA() && CudaKernels() != nullptr; }

#define SKIP_WITHOUT_CUDA()                                                                      \
  if (!HaveCuda()) GTEST_SKIP() << "no CUDA device (or kernels not linked): CUDA case skipped"

// Fills the CUDA caching allocator's free blocks with NaN so that outputs allocated next start as NaN:
// an element a kernel forgets to write shows up as NaN.
void PoisonCudaAllocator(int64_t bytes) {
  at::Tensor t = at::full({bytes / 4}, NAN, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  t.reset();
}

double Tolerance(at::ScalarType t) { return t == at::kFloat ? 1e-5 : 1e-2; }

class CudaKernelsTest : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(CudaKernelsTest, LayerNorm) {
  SKIP_WITHOUT_CUDA();
  const at::ScalarType dt = GetParam();
  auto opts = at::TensorOptions().dtype(dt).device(at::kCUDA);
  // In registers with 16-byte packs up to 4096 (bf16) / 2048 (fp32) elements; element by element beyond.
  for (int64_t h : {kCols, int64_t{768}, int64_t{1600}, int64_t{2048}, int64_t{8192}}) {
    at::Tensor x = at::randn({kRows * 11, h}, opts), w = at::randn({h}, opts), b = at::randn({h}, opts);
    at::Tensor dy = at::randn({kRows * 11, h}, opts);
    PoisonCudaAllocator(64 << 20);
    LayerNormResult got = CudaKernels()->LayerNormForward(x, w, b, 1e-5);
    LayerNormResult want = CompositeKernels().LayerNormForward(x, w, b, 1e-5);
    EXPECT_FALSE(got.y.isnan().any().item<bool>()) << "unwritten output, h=" << h;
    EXPECT_LT(RelErr(got.y, want.y), Tolerance(dt)) << h;
    PoisonCudaAllocator(64 << 20);
    LayerNormGrads g = CudaKernels()->LayerNormBackward(dy, x, got.mean, got.rstd, w);
    LayerNormGrads r = CompositeKernels().LayerNormBackward(dy, x, want.mean, want.rstd, w);
    EXPECT_FALSE(g.dx.isnan().any().item<bool>()) << h;
    EXPECT_LT(RelErr(g.dx, r.dx), Tolerance(dt)) << h;
    EXPECT_LT(RelErr(g.dweight, r.dweight), Tolerance(dt)) << h;
    EXPECT_LT(RelErr(g.dbias, r.dbias), Tolerance(dt)) << h;
  }
}

TEST_P(CudaKernelsTest, BiasGelu) {
  SKIP_WITHOUT_CUDA();
  const at::ScalarType dt = GetParam();
  auto opts = at::TensorOptions().dtype(dt).device(at::kCUDA);
  for (int64_t f : {3 * kCols, int64_t{3072}}) {  // Element by element, and in 16-byte packs.
    at::Tensor x = at::randn({kRows * 7, f}, opts), b = at::randn({f}, opts);
    at::Tensor dy = at::randn_like(x);
    PoisonCudaAllocator(16 << 20);
    at::Tensor y = CudaKernels()->BiasGeluForward(x, b);
    EXPECT_FALSE(y.isnan().any().item<bool>()) << f;
    EXPECT_LT(RelErr(y, CompositeKernels().BiasGeluForward(x, b)), Tolerance(dt)) << f;
    PoisonCudaAllocator(16 << 20);
    at::Tensor du = CudaKernels()->BiasGeluBackward(dy, x, b);
    EXPECT_FALSE(du.isnan().any().item<bool>()) << f;
    EXPECT_LT(RelErr(du, CompositeKernels().BiasGeluBackward(dy, x, b)), Tolerance(dt)) << f;
  }
}

TEST_P(CudaKernelsTest, CausalSoftmax) {
  SKIP_WITHOUT_CUDA();
  const at::ScalarType dt = GetParam();
  auto opts = at::TensorOptions().dtype(dt).device(at::kCUDA);
  for (int64_t t : {kSeq, int64_t{256}, int64_t{1031}}) {
    at::Tensor s = at::randn({3, t, t}, opts), dy = at::randn({3, t, t}, opts);
    PoisonCudaAllocator(64 << 20);
    at::Tensor y = CudaKernels()->CausalSoftmaxForward(s, 0.125);
    EXPECT_FALSE(y.isnan().any().item<bool>()) << t;
    EXPECT_LT(RelErr(y, CompositeKernels().CausalSoftmaxForward(s, 0.125)), Tolerance(dt)) << t;
    PoisonCudaAllocator(64 << 20);
    at::Tensor dx = CudaKernels()->CausalSoftmaxBackward(dy, y, 0.125);
    EXPECT_FALSE(dx.isnan().any().item<bool>()) << t;
    EXPECT_LT(RelErr(dx, CompositeKernels().CausalSoftmaxBackward(dy, y, 0.125)), Tolerance(dt)) << t;
  }
}

TEST_P(CudaKernelsTest, CrossEntropy) {
  SKIP_WITHOUT_CUDA();
  const at::ScalarType dt = GetParam();
  auto opts = at::TensorOptions().dtype(dt).device(at::kCUDA);
  // Odd widths take the scalar path, multiples of the vector width the vectorised one.
  for (int64_t v : {kCols, int64_t{1024}, int64_t{50304}, int64_t{50257}}) {
    at::Tensor x = at::randn({kRows * 5, v}, opts) * 4;
    at::Tensor target = at::randint(-1, v, {kRows * 5}, opts.dtype(at::kLong));  // −1: another slice.
    at::Tensor dloss = at::randn({kRows * 5}, opts.dtype(at::kFloat));
    PoisonCudaAllocator(64 << 20);
    SoftmaxStats got = CudaKernels()->CrossEntropyForward(x);
    SoftmaxStats want = CompositeKernels().CrossEntropyForward(x);
    EXPECT_TRUE(at::equal(got.max, want.max)) << v;  // A maximum is exact.
    EXPECT_LT(RelErr(got.sum_exp, want.sum_exp), 1e-5) << v;  // fp32 sums in another order.
    at::Tensor lse = want.max + want.sum_exp.log();
    PoisonCudaAllocator(64 << 20);
    at::Tensor dx = CudaKernels()->CrossEntropyBackward(x, lse, target, dloss);
    EXPECT_FALSE(dx.isnan().any().item<bool>()) << v;
    EXPECT_EQ(dx.scalar_type(), dt);
    EXPECT_LT(RelErr(dx, CompositeKernels().CrossEntropyBackward(x, lse, target, dloss)), Tolerance(dt)) << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaKernelsTest, ::testing::Values(at::kFloat, at::kBFloat16));

TEST(CudaAdamWTest, MatchesComposite) {
  SKIP_WITHOUT_CUDA();
  auto opts = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  AdamWStep step{1e-3, 0.9, 0.95, 1e-8, 0.1, 5};
  std::vector<at::Tensor> p, g, m, v, p2, m2, v2;
  for (int64_t n : {1, 4099, 3 * 65536 + 17}) {  // Inside one chunk, and across chunk boundaries.
    p.push_back(at::randn({n}, opts));
    g.push_back(at::randn({n}, opts));
    m.push_back(at::randn({n}, opts) * 0.1);
    v.push_back(at::rand({n}, opts) * 0.01);
    p2.push_back(p.back().clone()), m2.push_back(m.back().clone()), v2.push_back(v.back().clone());
  }
  CudaKernels()->AdamW(p, g, m, v, step);
  CompositeKernels().AdamW(p2, g, m2, v2, step);
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_LT(RelErr(p[i], p2[i]), 1e-6) << i;
    EXPECT_LT(RelErr(m[i], m2[i]), 1e-6) << i;
    EXPECT_LT(RelErr(v[i], v2[i]), 1e-6) << i;
  }
}

// The kernel that writes both layouts against the composite, bit for bit (data, transpose, scale), on
// poisoned outputs: whole 64 x 64 tiles, partial tiles in either dimension, more row tiles than one grid
// row holds (65,536 > 65,535: the stride loop), and a shape it hands to the composite (not multiples of
// 16). Which path each shape takes is asserted, so a refusal of every shape cannot pass for the kernel.
TEST(CudaFp8Test, TransposedQuantisationIsBitEqualToTheComposite) {
  SKIP_WITHOUT_CUDA();
  struct Shape {
    int64_t rows, cols;
    bool kernel;
  };
  const std::vector<Shape> shapes = {
      {8192, 2048, true}, {48, 80, true}, {4176, 48, true}, {16, 4112, true}, {65536 * 64 + 16, 16, true},
      {40, 24, false}};
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf}) {
    for (const Shape& sh : shapes) {
      const int64_t r = sh.rows, c = sh.cols;
      at::Tensor x = (at::randn({r, c}, at::TensorOptions().device(at::kCUDA)) * 3).to(dt);
#ifdef TESSERA_HAVE_CUDA
      at::Tensor out = at::empty({r, c}, x.options().dtype(at::kByte)), out_t = at::empty({c, r}, out.options());
      EXPECT_EQ(cuda::CanQuantizeFp8Transposed(dt == at::kHalf ? cuda::DType::kHalf : cuda::DType::kBFloat16,
                                               x.data_ptr(), out.data_ptr(), out_t.data_ptr(), r, c),
                sh.kernel)
          << r << "x" << c;
#endif
      for (at::ScalarType f : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
        PoisonCudaAllocator(64 << 20);
        Fp8Transposed got = CudaKernels()->QuantizeFp8TensorwiseTransposed(x, f);
        Fp8Transposed want = CompositeKernels().QuantizeFp8TensorwiseTransposed(x, f);
        EXPECT_TRUE(at::equal(got.data.view(at::kByte), want.data.view(at::kByte))) << r << "x" << c << " " << f;
        EXPECT_TRUE(at::equal(got.data_t.view(at::kByte), want.data_t.view(at::kByte))) << r << "x" << c << " " << f;
        EXPECT_TRUE(at::equal(got.inv_scale, want.inv_scale)) << r << "x" << c << " " << f;
      }
    }
  }
}

// The GPT's fused path: on CUDA with fused on, the CUDA kernels are selected; off, plain ATen.
TEST(CudaFusedOpsTest, SelectsCudaKernelsOnlyWhenOn) {
  SKIP_WITHOUT_CUDA();
  at::Tensor x = at::randn({4, kCols}, at::TensorOptions().device(at::kCUDA));
  EXPECT_EQ(SelectKernels(x, true), CudaKernels());
  EXPECT_EQ(SelectKernels(x, false), nullptr);
}

}  // namespace
}  // namespace tessera::kernels
