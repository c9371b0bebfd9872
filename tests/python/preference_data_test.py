"""`tessera data prepare --preference` against TRL 0.24's own code: for pairs made from
chat_template_test.py's templates and conversations (a prompt ending with a user message, one ending
with an assistant message the completions continue, tools, multimodal content, text records with
margins), the three documents of each pair equal DPOTrainer.tokenize_row(maybe_apply_chat_template(
record)) without the EOS tokenize_row appends to each completion; PREFIX.pref.json and
PREFIX.pref.margin are as docs/data-format.md says (an independent reader); bad records are refused
with their line and the problem, and leave no dataset."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from transformers import PreTrainedTokenizerFast
from trl import DPOTrainer
from trl.data_utils import maybe_apply_chat_template

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_test as ct  # noqa: E402 - the templates, conversations and the trained tokenizer
from data_reference import read_indexed_dataset  # noqa: E402

TESSERA = os.path.abspath("client/tessera")


def trl_ids(hf, record):
    """(prompt, chosen, rejected) ids as TRL's DPOTrainer makes them, without the EOS it appends."""
    example = {k: record[k] for k in ("prompt", "chosen", "rejected")}
    row = maybe_apply_chat_template(example, hf, tools=record.get("tools"))
    ids = DPOTrainer.tokenize_row(row, hf, max_prompt_length=None, max_completion_length=None,
                                  add_special_tokens=False)
    for k in ("chosen_input_ids", "rejected_input_ids"):
        assert ids[k][-1] == hf.eos_token_id
    return ids["prompt_input_ids"], ids["chosen_input_ids"][:-1], ids["rejected_input_ids"][:-1]


def pairs_of(conversations, prefill=False):
    """One pair per assistant message: the conversation before it as the prompt, it as chosen, a
    different answer as rejected (with `prefill`, the prompt also holds the start of the answer)."""
    out = []
    for c in conversations:
        for i, m in enumerate(c):
            if m["role"] != "assistant" or i == 0 or c[i - 1]["role"] != "user":
                continue  # TRL takes a prompt that ends with a user message (or a prefill, below).
            prompt = list(c[:i])
            if prefill:
                if not isinstance(m.get("content"), str):
                    continue
                prompt.append({"role": "assistant", "content": "Sure, "})
            # TRL takes a record for conversational by one of its keys picked at random (a set's pop) and
            # only when that key's first message has "content": a tool-call message gets an empty one.
            m = m if "content" in m else dict(m, content="")
            out.append({"prompt": prompt, "chosen": [m],
                        "rejected": [{"role": "assistant", "content": "No idea — ask «someone» else."}]})
    return out


class PreferenceDataTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="preference-data-")
        cls.base = ct.small_tokenizer()

    def save(self, name, template):
        return ct.save_tokenizer(self.base, self.dir, name, template)

    def prepare(self, path, records, out, lines=None):
        inp = os.path.join(self.dir, out + ".jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            if lines is None:
                lines = [json.dumps(r, ensure_ascii=False) for r in records]
            f.write("\n".join(lines) + "\n")
        prefix = os.path.join(self.dir, out)
        r = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", path, "--preference", inp,
                            prefix], capture_output=True, text=True)
        return r, prefix

    def check(self, hf, records, prefix):
        _, docs = read_indexed_dataset(prefix)
        with open(prefix + ".pref.json") as f:
            meta = json.load(f)
        self.assertEqual(meta["format"], "tessera-preference")
        self.assertEqual(meta["version"], 1)
        self.assertEqual(meta["pairs"], len(records))
        self.assertEqual(meta["tokens"], sum(len(d) for d in docs))
        self.assertEqual(len(docs), 3 * len(records))
        with_margin = "margin" in records[0]
        self.assertEqual(meta["margins"], with_margin)
        self.assertEqual(os.path.exists(prefix + ".pref.margin"), with_margin)
        if with_margin:
            margins = np.fromfile(prefix + ".pref.margin", dtype="<f8")
            self.assertEqual(margins.tolist(), [float(r["margin"]) for r in records])
        for k, record in enumerate(records):
            prompt, chosen, rejected = trl_ids(hf, record)
            self.assertEqual(docs[3 * k], prompt, f"pair {k}: prompt")
            self.assertEqual(docs[3 * k + 1], chosen, f"pair {k}: chosen")
            self.assertEqual(docs[3 * k + 2], rejected, f"pair {k}: rejected")
            self.assertGreater(len(chosen), 0)
        return len(records)

    def test_every_template_tokenizes_pairs_as_trl_does(self):
        total = 0
        for name, template in ct.TEMPLATES.items():
            path, hf = self.save(name, template)
            records = pairs_of(ct.CONVERSATIONS)
            if name in ("chatml", "llama3"):  # Templates that render two assistant messages in a row.
                records += pairs_of(ct.CONVERSATIONS, prefill=True)
            if name == "tools":
                for r in pairs_of([ct.TOOL_CONVERSATION]):
                    r["tools"] = ct.TOOL_SCHEMAS
                    records.append(r)
            if name == "macros":
                records += pairs_of([ct.MULTIMODAL])
            r, prefix = self.prepare(path, records, name)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"{len(records)} pairs", r.stdout)
            total += self.check(hf, records, prefix)
        self.assertGreater(total, 20)

    def test_text_records_with_margins(self):
        path, hf = self.save("text", ct.CHATML)
        records = [{"prompt": "Translate: Grüße →", "chosen": " greetings", "rejected": " goodbye", "margin": 1.5},
                   {"prompt": "", "chosen": "日本語", "rejected": "English", "margin": -0.25},
                   {"prompt": "2+2=", "chosen": "4", "rejected": "5", "margin": 0, "id": "ignored"}]
        r, prefix = self.prepare(path, records, "text")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(".pref.margin", r.stdout)
        self.check(hf, records, prefix)

    def test_a_bad_record_is_refused_by_line_and_leaves_no_dataset(self):
        path, _ = self.save("bad", ct.CHATML)
        good = {"prompt": [{"role": "user", "content": "Hi"}], "chosen": [{"role": "assistant", "content": "Hello"}],
                "rejected": [{"role": "assistant", "content": "Go away"}]}
        cases = [
            ({"prompt": good["prompt"], "chosen": good["chosen"]}, "rejected: is missing"),
            (dict(good, rejected=good["chosen"]), "chosen and rejected are the same completion"),
            # The same messages with their keys in another order: the same tokens (review finding).
            (dict(good, rejected=[{"content": "Hello", "role": "assistant"}]), "chosen and rejected are the same completion"),
            (dict(good, margin=1e300), "margin: must be a finite number within float32's range"),
            (dict(good, chosen=[{"role": "asistant", "content": "x"}]), "chosen[0].role: \"asistant\" is not a chat role"),
            (dict(good, prompt=[{"role": "system", "content": "x"}]), "prompt[0].role: the prompt must end with a user"),
            (dict(good, prompt=[]), "prompt: is empty"),
            (dict(good, chosen="text"), "chosen: must be a list"),
            (dict(good, margin="big"), "margin: must be a finite number"),
            (dict(good, chat_template_kwargs={"x": 1}), "chat_template_kwargs: is not supported"),
            ({"prompt": "p", "chosen": "", "rejected": "r"}, "chosen: has no tokens"),
            ({"prompt": "p", "chosen": ["x"], "rejected": "r"}, "chosen: must be a string, as the prompt is"),
            ({"prompt": 3, "chosen": "c", "rejected": "r"}, "prompt: must be a list of messages or a string"),
        ]
        for k, (bad, expected) in enumerate(cases):
            lines = [json.dumps(good), json.dumps(bad)]
            r, prefix = self.prepare(path, None, f"bad{k}", lines=lines)
            self.assertNotEqual(r.returncode, 0, expected)
            self.assertIn(f"bad{k}.jsonl:2: {expected}", r.stderr)
            for ext in (".bin", ".idx", ".pref.json", ".pref.margin"):
                self.assertFalse(os.path.exists(prefix + ext), f"{expected}: {ext} left behind")
        # A failed prepare over an existing dataset leaves that dataset whole (review finding: its
        # .pref.json was removed before the records were checked).
        r, prefix = self.prepare(path, None, "kept", lines=[json.dumps(good)])
        self.assertEqual(r.returncode, 0, r.stderr)
        before = {ext: open(prefix + ext, "rb").read() for ext in (".bin", ".idx", ".pref.json")}
        r, _ = self.prepare(path, None, "kept", lines=[json.dumps(good), json.dumps({"prompt": "p"})])
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual({ext: open(prefix + ext, "rb").read() for ext in before}, before)
        # Margins: every record or none.
        r, _ = self.prepare(path, None, "mixed", lines=[json.dumps(dict(good, margin=1)), json.dumps(good)])
        self.assertIn("mixed.jsonl:2: margin: every record has a margin or none does", r.stderr)
        self.assertRegex(r.stderr, r"the first record \(\S*mixed\.jsonl:1\) has (one|none)")
        r, _ = self.prepare(path, None, "notjson", lines=[json.dumps(good), "{oops"])
        self.assertIn("notjson.jsonl:2: not valid JSON", r.stderr)
        # A conversational record needs a chat template.
        plain = os.path.join(self.dir, "plain")
        PreTrainedTokenizerFast(tokenizer_object=self.base, eos_token="</s>").save_pretrained(plain)
        r, _ = self.prepare(plain, None, "notemplate", lines=[json.dumps(good)])
        self.assertIn("notemplate.jsonl:1: a conversational record needs the tokenizer's chat template", r.stderr)


if __name__ == "__main__":
    unittest.main()
