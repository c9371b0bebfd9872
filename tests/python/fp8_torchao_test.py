"""tessera's FP8 linear layer (parallel/layers/fp8_linear.h) against torchao's own Float8Linear, on the CPU.

The same bf16 x, w and output gradient go to tests/fp8/fp8_linear_tool (tessera's Linear under an Fp8Scope)
and to torchao.float8's Float8Linear (convert_to_float8_training with the recipe of the same name). With
the tensorwise recipe both quantise with the same scales and multiply the same fp8 operands; on the CPU
tessera multiplies them as torch's CPU fallback for _scaled_mm does (the scaled operands' product in fp32,
rounded once), and torchao's _scaled_mm is that product here too (torch's CPU _scaled_mm takes oneDNN's
FP8 path on CPUs with AVX512-FP16/AMX, which is slow and less exact: parallel/layers/fp8_linear.cc), so
y, dx and dw are equal bit for bit (tolerance 0). torchao's rowwise recipe does not run on
the CPU (torch 2.11's CPU _scaled_mm takes one scale per tensor only); that is asserted, and tessera's
rowwise path is held instead to torchao's own rowwise quantisation (hp_tensor_to_float8_dynamic with
axiswise scales, power-of-two) followed by an fp32 product: equal to one bf16 rounding (2^-8 relative,
both round an fp32 product once). The test can fail: tessera without the quantisation (plain bf16
linear) differs from torchao by ~1e-2.
"""
import os
import subprocess
import sys
import tempfile
import unittest
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import torchao  # noqa: E402
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: E402

TOOL = os.path.abspath("tests/fp8/fp8_linear_tool")
M, K, N = 64, 128, 96


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    w = (torch.randn(N, K, generator=g) * 0.05).to(torch.bfloat16)
    gy = (torch.randn(M, N, generator=g) * 1e-2).to(torch.bfloat16)
    return x, w, gy


def tessera(recipe, x, w, gy):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
        safetensors_io.save(src, {"x": x, "w": w, "gy": gy})
        subprocess.run([TOOL, src, dst, recipe], check=True)
        return safetensors_io.load(dst)


def cpu_scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    """torch's CPU fallback for _scaled_mm: the product of the scaled operands in fp32, rounded once."""
    assert bias is None and scale_result is None
    out = (a.float() * scale_a) @ (b.float() * scale_b)
    return out.to(out_dtype or a.dtype)


def torchao_linear(recipe, x, w, gy):
    m = torch.nn.Sequential(torch.nn.Linear(K, N, bias=False)).to(torch.bfloat16)
    with torch.no_grad():
        m[0].weight.copy_(w)
    convert_to_float8_training(m, config=Float8LinearConfig.from_recipe_name(recipe))
    xs = x.clone().requires_grad_(True)
    scaled_mm, torch._scaled_mm = torch._scaled_mm, cpu_scaled_mm
    try:
        y = m(xs)
        y.backward(gy)
    finally:
        torch._scaled_mm = scaled_mm
    return {"y": y.detach(), "dx": xs.grad, "dw": m[0].weight.grad}


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


class Fp8TorchaoTest(unittest.TestCase):
    def test_tensorwise_equals_float8_linear_bit_for_bit(self):
        self.assertEqual(torchao.__version__, "0.15.0")
        for seed in (1, 2):
            x, w, gy = inputs(seed)
            got, want = tessera("tensorwise", x, w, gy), torchao_linear("tensorwise", x, w, gy)
            for name in ("y", "dx", "dw"):
                self.assertEqual(got[name].dtype, torch.bfloat16, name)
                self.assertTrue(torch.equal(got[name], want[name]), f"{name}: max rel diff {rel(got[name], want[name]):.3g}")
            # Not vacuous: the plain bf16 product is far from torchao's FP8 one.
            self.assertGreater(rel((x.float() @ w.float().t()).to(torch.bfloat16), want["y"]), 1e-3)

    def test_rowwise_equals_torchaos_rowwise_quantisation(self):
        x, w, gy = inputs(3)
        with self.assertRaises(RuntimeError):  # torchao's own rowwise GEMM: per-tensor scales only on the CPU.
            m = torch.nn.Sequential(torch.nn.Linear(K, N, bias=False)).to(torch.bfloat16)
            convert_to_float8_training(m, config=Float8LinearConfig.from_recipe_name("rowwise"))
            m(x)
        from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
        from torchao.float8.float8_training_tensor import GemmInputRole, LinearMMConfig
        from torchao.float8.config import ScalingGranularity

        def deq(t, dtype, axis):
            f8 = hp_tensor_to_float8_dynamic(t, dtype, LinearMMConfig(), gemm_input_role=GemmInputRole.INPUT,
                                             scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=axis,
                                             round_scales_to_power_of_2=True)
            return f8._data.float() / f8._scale

        e4 = torch.float8_e4m3fn
        got = tessera("rowwise", x, w, gy)
        want = {
            "y": deq(x, e4, -1) @ deq(w, e4, -1).t(),
            "dx": deq(gy, e4, -1) @ deq(w, e4, 0),
            "dw": deq(gy.t().contiguous(), e4, -1) @ deq(x, e4, 0),
        }
        for name in ("y", "dx", "dw"):
            self.assertLess(rel(got[name], want[name]), 2.0 ** -8, name)


if __name__ == "__main__":
    unittest.main()
