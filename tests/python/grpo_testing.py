"""What the GRPO tests share: the tools' JSON call, the small tokenizer, and a real TRL 0.24 GRPOTrainer on
a tiny Llama (seed 0) whose parts a test then replaces (its generation, its log-probabilities)."""
import json
import os
import subprocess
import sys

import datasets
import transformers
import torch
from transformers import PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_test as ct  # noqa: E402


def run_tool(tool, case):
    """A tessera test tool's JSON answer to `case` (JSON on its stdin)."""
    r = subprocess.run([tool], input=json.dumps(case), capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def small_tokenizer():
    return PreTrainedTokenizerFast(tokenizer_object=ct.small_tokenizer(), bos_token="<s>", eos_token="</s>",
                                   pad_token="</s>")


def grpo_trainer(tmp, tokenizer, reward_funcs, **config):
    """GRPOTrainer over a tiny LlamaForCausalLM (1 layer, hidden 32; seed 0), one prompt "a b", on the CPU in
    float32, with GRPOConfig(**config)."""
    llama = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    args = GRPOConfig(output_dir=os.path.join(tmp, "grpo"), report_to=[], use_cpu=True, bf16=False, **config)
    return GRPOTrainer(model=transformers.LlamaForCausalLM(llama), reward_funcs=reward_funcs, args=args,
                       train_dataset=datasets.Dataset.from_list([{"prompt": "a b"}]), processing_class=tokenizer)
