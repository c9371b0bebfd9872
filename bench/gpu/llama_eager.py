"""The peer of `gpu_bench train --size llama1b`: transformers' LlamaForCausalLM with the same shape (16 layers,
hidden 2048, 32 heads / 8 key-value heads, SwiGLU 8192, vocabulary 32,000, tied head, seq 2048), SDPA
attention, bf16 parameters, the full training step as gpu_bench train runs it (fp32 masters, global-norm
clipping at 1.0, PyTorch's fused AdamW, masters cast back to bf16, the loss read on the host), timed as
gpu_bench times it (median of 10 steps after 3 warm-ups, synchronised).

--compile: torch.compile(model) (default mode). --fp8 tensorwise|rowwise: torchao's Float8Linear on every
linear layer but the head (torchao's convert_to_float8_training with the recipe of that name) — the recipe
torchtitan uses, normally with --compile. --lora R: peft's LoRA of rank R (alpha 2R, no dropout) on the q, k, v,
o, gate, up and down projections, only the adapters train (the peer of gpu_bench train --lora R).

Prints one line in gpu_bench's format: "hf_llama_train size llama1b compile 0|1 fp8 R ... step_ms T ...".
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mixed_precision_step import MasterWeights, time_training_steps  # noqa: E402

SHAPE = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
             num_key_value_heads=8, vocab_size=32000, max_position_embeddings=2048, rope_theta=500000.0,
             rms_norm_eps=1e-5, tie_word_embeddings=True)
SEQ = 2048


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--fp8", default="none", choices=["none", "tensorwise", "rowwise"])
    ap.add_argument("--lora", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="a 2-layer, 256-wide model at seq 128 on the CPU (a check of this script)")
    a = ap.parse_args()
    global SEQ
    if a.smoke:
        SHAPE.update(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=512)
        SEQ = 128
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    dev = torch.device("cpu" if a.smoke else "cuda")
    torch.manual_seed(0)
    cfg = LlamaConfig(**SHAPE)
    cfg._attn_implementation = "sdpa"
    with torch.device(dev):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.train()
    if a.fp8 != "none":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(a.fp8),
                                   module_filter_fn=lambda m, fqn: fqn != "lm_head")
    if a.lora > 0:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                 "gate_proj", "up_proj", "down_proj"]))
        model.train()
    fwd = torch.compile(model) if a.compile else model
    tokens = torch.randint(cfg.vocab_size, (a.batch, SEQ), device=dev)
    opt = MasterWeights((p for p in model.parameters() if p.requires_grad), dev)
    t, warm_s, last_loss = time_training_steps(fwd, tokens, opt, dev)
    n_params = sum(p.numel() for p in model.parameters())
    tokens_per_step = a.batch * SEQ
    L, h = SHAPE["num_hidden_layers"], SHAPE["hidden_size"]
    flops = tokens_per_step * (6.0 * n_params + 12.0 * L * h * SEQ)
    print(f"hf_llama_train size llama1b transformers {transformers.__version__} compile {int(a.compile)} fp8 {a.fp8} lora {a.lora} params {n_params} batch {a.batch} "
          f"seq {SEQ} step_ms {t * 1e3:.2f} tokens_per_s {tokens_per_step / t:.0f} model_TFLOPs {flops / t / 1e12:.1f} "
          f"warmup_s {warm_s:.1f} last_loss {last_loss:.4f} "
          f"peak_mem_GB {torch.cuda.max_memory_allocated() / 1e9 if dev.type == 'cuda' else 0:.1f}",
          flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
