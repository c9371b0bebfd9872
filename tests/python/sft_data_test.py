"""`tessera data prepare --chat` against the definition, computed with transformers and the `tokenizers`
library: for every conversation of chat_template_test.py's templates (and a prompt/completion record),
the tokens of PREFIX.bin equal `apply_chat_template(tokenize=True)`, and PREFIX.sft.mask marks exactly
the tokens whose characters (the library's own offsets) lie in an assistant turn — what rendering
messages[:i+1] adds to rendering messages[:i] with add_generation_prompt=True. Also with an NFC
normalizer and decomposed characters in the text; a template that rewrites earlier turns is refused by
line and field; the files (.bin/.idx read by an independent reader, .sft.mask, .sft.json) are as
docs/data-format.md says."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from tokenizers import normalizers
from transformers import PreTrainedTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_test as ct  # noqa: E402 - the templates, conversations and the trained tokenizer
from data_reference import read_indexed_dataset  # noqa: E402

TESSERA = os.path.abspath("client/tessera")


def reference(hf, record):
    """(ids, trained flags) by the definition, with the library's offsets (characters)."""
    if "messages" in record:
        conv, tools = record["messages"], record.get("tools")
        text = hf.apply_chat_template(conv, tools=tools, tokenize=False)
        spans = []
        for i, m in enumerate(conv):
            if m["role"] != "assistant":
                continue
            prompt = hf.apply_chat_template(conv[:i], tools=tools, tokenize=False, add_generation_prompt=True)
            turn = hf.apply_chat_template(conv[:i + 1], tools=tools, tokenize=False)
            assert turn.startswith(prompt) and text.startswith(turn)
            spans.append((len(prompt), len(turn)))
    else:
        text = record["prompt"] + record["completion"] + hf.eos_token
        spans = [(len(record["prompt"]), len(text))]
    enc = hf.backend_tokenizer.encode(text, add_special_tokens=False)
    flags = [int(any(a <= b and e <= z for a, z in spans)) for b, e in enc.offsets]
    return enc.ids, flags


class SftDataTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sft-data-")
        cls.base = ct.small_tokenizer()

    def save(self, name, template, nfc=False):
        path = os.path.join(self.dir, name)
        base = self.base
        if nfc:
            base = ct.Tokenizer.from_str(self.base.to_str())
            base.normalizer = normalizers.NFC()
        fast = PreTrainedTokenizerFast(tokenizer_object=base, bos_token="<s>", eos_token="</s>",
                                       additional_special_tokens=["<|im_start|>", "<|im_end|>"])
        fast.chat_template = template
        fast.save_pretrained(path)
        return path, PreTrainedTokenizerFast.from_pretrained(path)

    def prepare(self, path, records, out):
        inp = os.path.join(self.dir, out + ".jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        prefix = os.path.join(self.dir, out)
        r = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", path, "--chat", inp, prefix],
                           capture_output=True, text=True)
        return r, prefix

    def check(self, hf, records, prefix):
        _, docs = read_indexed_dataset(prefix)
        mask = np.fromfile(prefix + ".sft.mask", dtype=np.uint8)
        with open(prefix + ".sft.json") as f:
            meta = json.load(f)
        self.assertEqual(len(docs), len(records))
        self.assertEqual(meta["format"], "tessera-sft")
        self.assertEqual(meta["conversations"], len(records))
        self.assertEqual(meta["tokens"], sum(len(d) for d in docs))
        self.assertEqual(len(mask), meta["tokens"])
        self.assertEqual(meta["trained_tokens"], int(mask.sum()))
        at = 0
        trained = 0
        for k, (record, doc) in enumerate(zip(records, docs)):
            ids, flags = reference(hf, record)
            self.assertEqual(doc, ids, f"record {k}: tokens")
            self.assertEqual(mask[at:at + len(doc)].tolist(), flags, f"record {k}: trained flags")
            at += len(doc)
            trained += sum(flags)
        self.assertGreater(trained, 0)
        return trained

    def test_every_template_marks_exactly_the_assistant_tokens(self):
        total = 0
        for name, template in ct.TEMPLATES.items():
            path, hf = self.save(name, template)
            records = [{"messages": c} for c in ct.CONVERSATIONS]
            if name == "tools":
                records.append({"messages": ct.TOOL_CONVERSATION, "tools": ct.TOOL_SCHEMAS})
            if name == "macros":
                records.append({"messages": ct.MULTIMODAL})
            records.append({"prompt": "Translate: Grüße →", "completion": " greetings"})
            r, prefix = self.prepare(path, records, name)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"{len(records)} conversations", r.stdout)
            total += self.check(hf, records, prefix)
        self.assertGreater(total, 200)

    def test_an_nfc_tokenizer_maps_rewritten_text_back(self):
        path, hf = self.save("chatml-nfc", ct.CHATML, nfc=True)
        decomposed = "Cafe\u0301 \u1100\u1161\u11a8 A\u030angstro\u0308m \u0041\u0301\u0323"
        records = [{"messages": [{"role": "user", "content": decomposed},
                                 {"role": "assistant", "content": decomposed + " ok"}]},
                   {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "\u1100\u1161"}]}]
        r, prefix = self.prepare(path, records, "nfc")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check(hf, records, prefix)

    def test_a_token_across_the_start_of_a_turn_is_not_trained(self):
        # " xyzw" is one token (trained so); the generation prompt ends in " xy" and the assistant's
        # content begins with "zw": that token lies partly outside the turn, so it is not trained.
        tok = ct.Tokenizer(ct.models.BPE())
        tok.pre_tokenizer = ct.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = ct.decoders.ByteLevel()
        trainer = ct.trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                         initial_alphabet=ct.pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(["Bot: xyzw said xyzw"] * 200, trainer)
        self.assertEqual(len(tok.encode(" xyzw").ids), 1)
        path = os.path.join(self.dir, "straddle")
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
        fast.chat_template = ("{% for m in messages %}{% if m.role == 'user' %}User: {{ m.content }}\n"
                              "{% else %}Bot: xy{{ m.content }}{{ eos_token }}\n{% endif %}{% endfor %}"
                              "{% if add_generation_prompt %}Bot: xy{% endif %}")
        fast.save_pretrained(path)
        hf = PreTrainedTokenizerFast.from_pretrained(path)
        records = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "zw said"}]}]
        r, prefix = self.prepare(path, records, "straddle")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check(hf, records, prefix)
        ids, flags = reference(hf, records[0])
        straddling = [k for k, i in enumerate(ids) if hf.convert_ids_to_tokens(i) == "Ġxyzw"]
        self.assertEqual(len(straddling), 1)
        self.assertEqual(flags[straddling[0]], 0)
        self.assertEqual(flags[straddling[0] + 1], 1, "the next token is the assistant's")

    def test_bad_records_are_refused_and_leave_no_dataset(self):
        path, _ = self.save("chatml-bad", ct.CHATML)
        good = {"messages": ct.CONVERSATIONS[0]}
        for bad, field in [({"messages": [{"content": "x"}]}, "messages[0].role: must be a string"),
                           ({"messages": []}, "messages: is empty"),
                           # A misspelt role would render and silently not be trained.
                           ({"messages": [{"role": "user", "content": "hi"}, {"role": "asistant", "content": "x"}]},
                            'messages[1].role: "asistant" is not a chat role'),
                           ({"prompt": 3, "completion": "x"}, "prompt: must be a string"),
                           ({"other": 1}, "a record needs")]:
            r, prefix = self.prepare(path, [good, bad], "bad")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(f"bad.jsonl:2: {field}", r.stderr)
            for ext in (".bin", ".idx", ".sft.mask", ".sft.json"):
                self.assertFalse(os.path.exists(prefix + ext), ext)
        # A template that renders earlier turns differently once later ones follow.
        shifting = "{{ messages | length }} turns:{% for m in messages %} {{ m.content }}{% endfor %}"
        path, _ = self.save("shifting", shifting)
        r, _ = self.prepare(path, [good], "shift")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("shift.jsonl:1: messages[1]: the chat template renders the earlier turns differently", r.stderr)


if __name__ == "__main__":
    unittest.main()
