"""`tessera data prepare --prompts` against TRL 0.24's own code: each prompt's tokens equal
tokenizer(maybe_apply_chat_template({"prompt": prompt})["prompt"], add_special_tokens=False) — what
GRPOTrainer generates from — over chat_template_test.py's templates (prompts ending with a user
message, and prefills ending with an assistant message) and text prompts; PREFIX.fields.jsonl keeps
every other field of the record and the rendered prompt as prompt_text; bad records are refused by
line and leave no dataset."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from trl.data_utils import maybe_apply_chat_template

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_test as ct  # noqa: E402 - the templates, conversations and the trained tokenizer
from data_reference import read_indexed_dataset  # noqa: E402

TESSERA = os.path.abspath("client/tessera")


def prompts_of(conversations):
    """Every prefix of a conversation that ends with a user message, and one prefill per conversation."""
    out = []
    for k, c in enumerate(conversations):
        for i, m in enumerate(c):
            if m["role"] == "user":
                out.append({"prompt": c[:i + 1], "answer": str(k * 10 + i), "id": f"c{k}m{i}"})
        if c[-1]["role"] == "user":
            out.append({"prompt": c + [{"role": "assistant", "content": "Let me think: "}], "answer": k})
    return out


class PromptDataTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="prompt-data-")
        cls.base = ct.small_tokenizer()

    def prepare(self, path, lines, out):
        inp = os.path.join(self.dir, out + ".jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        prefix = os.path.join(self.dir, out)
        r = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", path, "--prompts", inp, prefix],
                           capture_output=True, text=True)
        return r, prefix

    def check(self, hf, records, prefix):
        _, docs = read_indexed_dataset(prefix)
        with open(prefix + ".prompts.json") as f:
            meta = json.load(f)
        self.assertEqual(meta["format"], "tessera-prompts")
        self.assertEqual(meta["prompts"], len(records))
        self.assertEqual(meta["tokens"], sum(len(d) for d in docs))
        self.assertEqual(meta["version"], 2)
        # The job's stop token: the tokenizer's EOS (GRPOTrainer's eos_token_id), and its tokenizer.
        if hf.eos_token_id is not None:
            self.assertEqual(meta["stop_token"], hf.eos_token_id)
        else:
            self.assertNotIn("stop_token", meta)
        self.assertTrue(os.path.exists(prefix + ".tokenizer.json"))
        with open(prefix + ".fields.jsonl", encoding="utf-8") as f:
            fields = [json.loads(line) for line in f]
        self.assertEqual(len(docs), len(records))
        self.assertEqual(len(fields), len(records))
        for k, record in enumerate(records):
            text = maybe_apply_chat_template({"prompt": record["prompt"]}, hf)["prompt"]
            self.assertEqual(docs[k], hf(text, add_special_tokens=False)["input_ids"], f"prompt {k}")
            expected = {key: v for key, v in record.items() if key != "prompt"}
            expected["prompt_text"] = text
            self.assertEqual(fields[k], expected, f"prompt {k}: fields")

    def test_every_template_tokenizes_prompts_as_trl_does(self):
        total = 0
        for name in ("chatml", "llama3", "mistral", "macros"):
            path, hf = ct.save_tokenizer(self.base, self.dir, name, ct.TEMPLATES[name])
            records = prompts_of(ct.CONVERSATIONS)
            if name == "macros":
                records += prompts_of([ct.MULTIMODAL])
            r, prefix = self.prepare(path, [json.dumps(x, ensure_ascii=False) for x in records], name)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"{len(records)} prompts", r.stdout)
            self.check(hf, records, prefix)
            total += len(records)
        self.assertGreater(total, 20)

    def test_text_prompts(self):
        path, hf = ct.save_tokenizer(self.base, self.dir, "text", ct.CHATML)
        records = [{"prompt": "Q: 2+2=", "answer": 4}, {"prompt": ct.UNICODE, "tests": ["a", {"b": [1, 2.5]}]}]
        path_tools, hf_tools = ct.save_tokenizer(self.base, self.dir, "tools", ct.TOOLS)
        with_tools = [{"prompt": ct.TOOL_CONVERSATION[:2], "tools": ct.TOOL_SCHEMAS, "answer": "21.5"}]
        r, prefix = self.prepare(path_tools, [json.dumps(x, ensure_ascii=False) for x in with_tools], "with-tools")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check(hf_tools, with_tools, prefix)  # Rendered without the tools, as GRPOTrainer does; kept as a field.
        r, prefix = self.prepare(path, [json.dumps(x, ensure_ascii=False) for x in records], "text")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check(hf, records, prefix)

    def test_a_bad_record_is_refused_by_line_and_leaves_no_dataset(self):
        path, _ = ct.save_tokenizer(self.base, self.dir, "bad", ct.CHATML)
        good = {"prompt": [{"role": "user", "content": "Hi"}], "answer": 1}
        cases = [
            ({"answer": 1}, "prompt: is missing"),
            ({"prompt": []}, "prompt: is empty"),
            ({"prompt": [{"role": "system", "content": "x"}]}, "prompt[0].role: the prompt must end with a user"),
            ({"prompt": [{"role": "usr", "content": "x"}]}, "prompt[0].role: \"usr\" is not a chat role"),
            ({"prompt": ""}, "prompt: has no tokens"),
            ({"prompt": 7}, "prompt: must be a list of messages or a string"),
            (dict(good, prompt_text="x"), "prompt_text: is a name the dataset keeps"),
            (dict(good, chat_template_kwargs={"enable_thinking": False}), "chat_template_kwargs: is not supported"),
        ]
        for k, (bad, expected) in enumerate(cases):
            r, prefix = self.prepare(path, [json.dumps(good), json.dumps(bad)], f"bad{k}")
            self.assertNotEqual(r.returncode, 0, expected)
            self.assertIn(f"bad{k}.jsonl:2: {expected}", r.stderr)
            for ext in (".bin", ".idx", ".fields.jsonl", ".tokenizer.json", ".prompts.json"):
                self.assertFalse(os.path.exists(prefix + ext), f"{expected}: {ext} left behind")


if __name__ == "__main__":
    unittest.main()
