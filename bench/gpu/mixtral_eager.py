"""The peer of `gpu_bench train --size mixtral`: transformers' MixtralForCausalLM with the same shape (8 layers,
hidden 1024, 16 heads / 4 key-value heads, 8 experts of 3584, top-2, vocabulary 32,000, untied head, seq
2048, no balancing loss), SDPA attention, bf16 parameters, the full training step as gpu_bench train runs it
(mixed_precision_step.MasterWeights), timed as gpu_bench times it (median of 10 steps after 3 warm-ups).
transformers 4.57 (the version tests pin) runs the experts one by one (a loop over the experts that got
tokens); transformers 5 has experts backends: --experts eager|grouped_mm|batched_mm picks one (default: its own).

--compile: torch.compile(model). --smoke: a 2-layer, 256-wide model at seq 128 on the CPU (a check).
Prints "hf_mixtral_train size mixtral compile 0|1 ... step_ms T tokens_per_s R ...".
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mixed_precision_step import MasterWeights, time_training_steps  # noqa: E402

SHAPE = dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=8, num_attention_heads=16,
             num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000,
             max_position_embeddings=2048, rope_theta=1e6, rms_norm_eps=1e-5, tie_word_embeddings=False,
             output_router_logits=False, router_jitter_noise=0.0, sliding_window=None)
SEQ = 2048


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--experts", default="default", help="transformers 5's experts backend")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    global SEQ
    if a.smoke:
        SHAPE.update(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=512)
        SEQ = 128
    import transformers
    from transformers import MixtralConfig, MixtralForCausalLM
    dev = torch.device("cpu" if a.smoke else "cuda")
    torch.manual_seed(0)
    cfg = MixtralConfig(**SHAPE)
    cfg._attn_implementation = "sdpa"
    with torch.device(dev):
        model = MixtralForCausalLM(cfg).to(torch.bfloat16)
    model.train()
    experts = "loop"  # transformers 4.x: its only way.
    if int(transformers.__version__.split(".")[0]) >= 5:
        if a.experts != "default":
            if hasattr(model, "set_experts_implementation"):
                model.set_experts_implementation(a.experts)
            else:
                model.config._experts_implementation = a.experts
        experts = getattr(model.config, "_experts_implementation", None) or "default"
    fwd = torch.compile(model) if a.compile else model
    tokens = torch.randint(cfg.vocab_size, (a.batch, SEQ), device=dev)
    opt = MasterWeights(model.parameters(), dev)
    t, warm_s, last_loss = time_training_steps(fwd, tokens, opt, dev)
    n_params = sum(p.numel() for p in model.parameters())
    h, f, L = SHAPE["hidden_size"], SHAPE["intermediate_size"], SHAPE["num_hidden_layers"]
    active = n_params - L * (SHAPE["num_local_experts"] - SHAPE["num_experts_per_tok"]) * 3 * h * f
    tokens_per_step = a.batch * SEQ
    flops = tokens_per_step * (6.0 * active + 12.0 * L * h * SEQ)
    print(f"hf_mixtral_train size mixtral transformers {transformers.__version__} experts {experts} "
          f"compile {int(a.compile)} params {n_params} active {active} batch {a.batch} "
          f"seq {SEQ} step_ms {t * 1e3:.2f} tokens_per_s {tokens_per_step / t:.0f} model_TFLOPs {flops / t / 1e12:.1f} "
          f"warmup_s {warm_s:.1f} last_loss {last_loss:.4f} "
          f"peak_mem_GB {torch.cuda.max_memory_allocated() / 1e9 if dev.type == 'cuda' else 0:.1f}", flush=True)


if __name__ == "__main__":
    main()
