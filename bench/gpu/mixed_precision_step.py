"""The eager peers' optimizer step and step timing, shared by gpt_eager.py, llama_eager.py and
mixtral_eager.py. The step: bf16 parameters with fp32
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


def time_training_steps(fwd, tokens, opt, device, warmup=3, reps=10):
    """The full training step of a causal LM (`fwd(input_ids=tokens, labels=tokens).loss`, backward,
    `opt.step()`, the loss read on the host) timed as gpu_bench times tessera's: `warmup` steps, then the
    median of `reps` synchronised steps. Returns (median seconds, warm-up seconds, last loss)."""
    import statistics
    import time
    losses = []

    def step():
        loss = fwd(input_ids=tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    sync()
    warm_s = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), warm_s, losses[-1]
