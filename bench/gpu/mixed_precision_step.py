"""The eager peers' optimizer step, shared by gpt_eager.py and llama_eager.py: bf16 parameters with fp32
master copies, global-norm clipping at 1.0, PyTorch's AdamW (fused on CUDA) on the masters, the masters
cast back into the parameters — the usual eager recipe (Megatron's mixed-precision optimizer), as
`gpu_bench train` runs tessera's."""
import torch


class MasterWeights:
    def __init__(self, params, device):
        self.params = list(params)
        self.masters = [p.detach().float().clone() for p in self.params]
        self.opt = torch.optim.AdamW(self.masters, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                     fused=device.type == "cuda")

    def step(self):
        """Applies the parameters' gradients (then cleared) through the masters."""
        for m, p in zip(self.masters, self.params):
            # A parameter without a gradient (an expert that got no tokens) steps on zeros, as in tessera.
            m.grad = p.grad.float() if p.grad is not None else torch.zeros_like(m)
        torch.nn.utils.clip_grad_norm_(self.masters, 1.0)
        self.opt.step()
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.masters)
        for m in self.masters:
            m.grad = None
        self.zero_grad()

    def zero_grad(self):
        for p in self.params:
            p.grad = None
