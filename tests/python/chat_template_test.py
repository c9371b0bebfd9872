"""tessera's chat-template renderer (formats/chat/, `tessera data render-chat`) against transformers'
own rendering: `apply_chat_template(tokenize=False)` of tokenizers saved by transformers with five
templates written here in different styles (ChatML, Llama-3 header tokens, Mistral [INST] without
whitespace control, tool calls with namespace() and loop.last, macros with multimodal content lists),
conversations with and without system prompts, multi-turn, Unicode, with and without the generation
prompt — and the token ids of the rendering, by `tessera data tokenize`, against transformers'
tokenize=True. Then a battery of small templates rendered by transformers' own Jinja environment
(`_compile_jinja_template`: trim_blocks, lstrip_blocks, its tojson, raise_exception): expressions,
filters, tests, loops, scoping, whitespace control. A template that raises in Jinja must fail here too."""
import json
import os
import subprocess
import tempfile
import unittest

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import _compile_jinja_template

TESSERA = os.path.abspath("client/tessera")

CHATML = """{%- for message in messages %}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>' + '\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

LLAMA3 = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "You are a helpful assistant." %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message + '<|eot_id|>' }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# No whitespace control at all: trim_blocks and lstrip_blocks decide every newline and indent.
MISTRAL = """{% if messages[0]['role'] == 'system' %}
    {% set loop_messages = messages[1:] %}
    {% set system_message = messages[0]['content'] %}
{% else %}
    {% set loop_messages = messages %}
    {% set system_message = false %}
{% endif %}
{{ bos_token }}
{% for message in loop_messages %}
    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% endif %}
    {% if loop.index0 == 0 and system_message != false %}
        {% set content = system_message + '\\n\\n' + message['content'] %}
    {% else %}
        {% set content = message['content'] %}
    {% endif %}
    {% if message['role'] == 'user' %}{{ '[INST] ' + content.strip() + ' [/INST]' }}
    {% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + eos_token }}
    {% endif %}
{% endfor %}
"""

TOOLS = """{%- set ns = namespace(system='', tool_turns=0) %}
{%- for m in messages if m.role == 'system' %}{%- set ns.system = ns.system + m.content %}{%- endfor %}
{%- if tools %}
<tools>{{ tools | tojson }}</tools>
{% endif %}
{%- if ns.system %}<sys>{{ ns.system }}</sys>{% endif %}
{%- for m in messages if m.role != 'system' %}
{%- if m.role == 'assistant' and m.tool_calls is defined %}
<assistant><call>{% for c in m.tool_calls %}{{ c.function | tojson(sort_keys=true) }}{% if not loop.last %}, {% endif %}{% endfor %}</call></assistant>
{%- elif m.role == 'tool' %}{% set ns.tool_turns = ns.tool_turns + 1 %}
<result n="{{ ns.tool_turns }}">{{ m.content }}</result>
{%- else %}
<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<assistant>{% endif %}
"""

MACROS = """{%- macro render_content(content, sep='\\n') -%}
    {%- if content is string -%}
        {{- content -}}
    {%- else -%}
        {%- for part in content if part.type == 'text' -%}
            {{- part.text -}}{%- if not loop.last %}{{ sep }}{% endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{{ bos_token }}
{%- for message in messages %}
{%- set role = 'model' if message.role == 'assistant' else message.role %}
<turn {{ role }}>[n={{ loop.index }}{% if loop.previtem is defined %} after={{ loop.previtem.role }}{% endif %}]
{{ render_content(message.content) | indent(2, first=true) }}
</turn>
{%- endfor %}
{%- if add_generation_prompt %}
<turn model>
{%- endif %}
"""

TEMPLATES = {"chatml": CHATML, "llama3": LLAMA3, "mistral": MISTRAL, "tools": TOOLS, "macros": MACROS}

UNICODE = "Grüße 👋🏽 — 日本語のテキスト, עברית, ελληνικά\n\ttabbed  \u3000wide space"

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi. How can I help?"}],
    [{"role": "system", "content": "  You are terse.  "}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"},
     {"role": "assistant", "content": " 6 \n"}],
    [{"role": "user", "content": UNICODE}, {"role": "assistant", "content": "Verstanden 👍 «ok» \"quoted\" 'single'"}],
    [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "line one\nline two\n\nline four"}],
]

TOOL_CONVERSATION = [
    {"role": "system", "content": "You may call tools."},
    {"role": "user", "content": "Weather in Zürich and 東京?"},
    {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "°C"}}},
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "東京", "days": [1, 2.5]}}}]},
    {"role": "tool", "content": "{\"t\": 21.5}"},
    {"role": "tool", "content": "{\"t\": 18}"},
    {"role": "assistant", "content": "21.5 °C and 18 °C."},
]
TOOL_SCHEMAS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city — «now»",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "array"}},
                   "required": ["city"]}}}]

MULTIMODAL = [
    {"role": "user", "content": [{"type": "text", "text": "What is in"}, {"type": "image"},
                                 {"type": "text", "text": "this picture?\nTwo lines."}]},
    {"role": "assistant", "content": "A cat.\nOn a mat."},
]


def tessera(*args, stdin=None):
    return subprocess.run([TESSERA, *args], input=stdin, capture_output=True, text=True, encoding="utf-8")


def small_tokenizer():
    """A byte-level BPE trained here, with the special tokens the templates use."""
    specials = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>", "[INST]", "[/INST]"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [json.dumps(c, ensure_ascii=False) for c in CONVERSATIONS * 20 + [TOOL_CONVERSATION] * 5]
    tok.train_from_iterator(corpus, trainer)
    return tok


def save_tokenizer(base, directory, name, template):
    """`base` saved as a transformers tokenizer with `template` in DIRECTORY/NAME; (path, the tokenizer loaded)."""
    path = os.path.join(directory, name)
    fast = PreTrainedTokenizerFast(tokenizer_object=base, bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.chat_template = template
    fast.save_pretrained(path)
    return path, PreTrainedTokenizerFast.from_pretrained(path)


class ChatTemplateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="chat-template-")
        cls.base = small_tokenizer()

    def save(self, name, template):
        return save_tokenizer(self.base, self.dir, name, template)

    def render(self, path, conversations, generation_prompt, tools=None):
        lines = "".join(json.dumps({"messages": c, **({"tools": tools} if tools else {})}, ensure_ascii=False) + "\n"
                        for c in conversations)
        args = ["data", "render-chat", "--tokenizer", path, "-"]
        if generation_prompt:
            args.append("--add-generation-prompt")
        r = tessera(*args, stdin=lines)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [json.loads(l)["text"] for l in r.stdout.splitlines()]

    def test_templates_render_as_transformers_does(self):
        checked = 0
        for name, template in TEMPLATES.items():
            path, hf = self.save(name, template)
            conversations = list(CONVERSATIONS)
            if name == "macros":
                conversations.append(MULTIMODAL)
            for generation_prompt in (False, True):
                tools = TOOL_SCHEMAS if name == "tools" else None
                convs = conversations + ([TOOL_CONVERSATION] if name == "tools" else [])
                got = self.render(path, convs, generation_prompt, tools)
                self.assertEqual(len(got), len(convs))
                for conv, text in zip(convs, got):
                    want = hf.apply_chat_template(conv, tools=tools, tokenize=False,
                                                  add_generation_prompt=generation_prompt)
                    self.assertEqual(text, want, f"template {name}, generation prompt {generation_prompt}")
                    # The ids of the rendering: tessera's tokenizer on tessera's text, against
                    # transformers' tokenize=True.
                    ids = hf.apply_chat_template(conv, tools=tools, tokenize=True,
                                                 add_generation_prompt=generation_prompt)
                    r = tessera("data", "tokenize", "--special", "--tokenizer", os.path.join(path, "tokenizer.json"),
                                "--text", text)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(json.loads(r.stdout), list(ids), f"template {name}")
                    checked += 1
        self.assertGreaterEqual(checked, 40)

    def test_a_template_that_raises_fails_with_its_message(self):
        path, hf = self.save("mistral-raise", MISTRAL)
        bad = [{"role": "assistant", "content": "I speak first"}, {"role": "user", "content": "?"}]
        with self.assertRaises(Exception) as caught:
            hf.apply_chat_template(bad, tokenize=False)
        self.assertIn("must alternate", str(caught.exception))
        r = tessera("data", "render-chat", "--tokenizer", path, "-", stdin=json.dumps({"messages": bad}) + "\n")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("-:1: ", r.stderr)
        self.assertIn("Conversation roles must alternate", r.stderr)

    def test_bad_records_are_refused_by_line_and_field(self):
        path, _ = self.save("chatml-bad", CHATML)
        good = json.dumps({"messages": CONVERSATIONS[0]})
        for line, field in [("{not json", "not valid JSON"), ('{"x": 1}', "messages: missing"),
                            ('{"messages": {}}', "messages: must be a list"),
                            ('{"messages": [{"content": "no role"}]}', "messages[0].role: must be a string")]:
            r = tessera("data", "render-chat", "--tokenizer", path, "-", stdin=good + "\n" + line + "\n")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(f"-:2: {field}", r.stderr)

    def test_small_templates_render_as_jinja_does(self):
        data = {"s": "  Hello, Wörld! 日本語 👨‍👩‍👧 ", "n": 7, "f": 2.5, "big": 12345678901234, "neg": -3,
                "l": [3, 1, 2, 1], "words": ["b", "A", "c"], "d": {"z": 1, "a": [1, {"k": None}], "m": "x'y\"z"},
                "people": [{"name": "Ann", "age": 31, "role": "user"}, {"name": "Bob", "age": 27, "role": "assistant"},
                           {"name": "Cy", "age": 31, "role": "user"}],
                "t": True, "none": None, "empty": "", "nested": [[1, 2], [3, 4]], "tiny": 1.5e-5, "huge": 1e22}
        cases = [
            # Output of values (Python's str and repr).
            "{{ d.n }} {{ d.f }} {{ d.big }} {{ d.neg }} {{ d.t }} {{ d.none }} [{{ d.missing }}] {{ d.tiny }} {{ d.huge }}",
            "{{ d.l }} {{ d.words }} {{ d.d }} {{ d.nested }} {{ d.people[0] }}",
            "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
            "{{ 0.1 + 0.2 }} {{ 1.0 }} {{ 100.0 * 3 }} {{ 1e16 }} {{ 123456789.123 }} {{ 3 * 1.5 }} {{ 10 / 5 }}",
            "{{ 'a' ~ 1 ~ d.f ~ d.none ~ d.t }} {{ 'ab' * 3 }} {{ [1] * 2 + [3] }} {{ 'x' + 'y' }}",
            "{{ d.n > 3 and d.f < 3 }} {{ not d.t }} {{ d.n == 7.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == true }}",
            "{{ 'll' in 'hello' }} {{ 2 in d.l }} {{ 'z' in d.d }} {{ 5 not in d.l }} {{ 'q' not in d.d }}",
            "{{ 'yes' if d.t else 'no' }} {{ 'yes' if d.none else 'no' }} [{{ 'x' if false }}]",
            "{{ d.s.strip() }}|{{ d.s.lstrip() }}|{{ d.s.rstrip() }}|{{ d.s | trim }}|{{ 'xxaxx'.strip('x') }}",
            "{{ d.s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'l1\\nl2\\r\\nl3'.splitlines() }}",
            "{{ d.s.upper() }} {{ d.s.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'hello'.replace('l', 'L') }}",
            "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'bc')) }} {{ 'banana'.find('an') }} {{ 'banana'.count('a') }} {{ '-'.join(['a', 'b']) }}",
            "{{ d.s[2:7] }} {{ d.s[::-1] }} {{ d.s[-3:] }} {{ d.l[1:] }} {{ d.l[::2] }} {{ d.l[-1] }} {{ '日本語'[1] }} [{{ d.l[10] }}]",
            "{{ d.s | length }} {{ d.l | length }} {{ d.d | length }} {{ d.l | count }} {{ d.missing | length }}",
            "{{ d.l | first }} {{ d.l | last }} {{ d.l | sort }} {{ d.l | sort(reverse=true) }} {{ d.words | sort }} {{ d.words | sort(case_sensitive=true) }}",
            "{{ d.l | unique | list }} {{ d.l | reverse | list }} {{ 'abc' | reverse }} {{ d.l | sum }} {{ d.l | min }} {{ d.l | max }}",
            "{{ d.l | join(', ') }} {{ d.people | map(attribute='name') | join('/') }} {{ d.words | map('upper') | list }}",
            "{{ d.people | selectattr('role', 'equalto', 'user') | map(attribute='name') | list }} {{ d.people | rejectattr('age', 'gt', 30) | list | length }}",
            "{{ d.l | select('odd') | list }} {{ d.l | reject('even') | list }} {{ d.people | sort(attribute='age') | map(attribute='name') | join }}",
            "{{ d.missing | default('dflt') }} {{ d.empty | default('dflt') }} {{ d.empty | default('dflt', true) }} {{ d.none | default('x') }}",
            "{{ '42' | int }} {{ '4.5' | float }} {{ 'x' | int(7) }} {{ 3.7 | int }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }}",
            "{{ d.d | items | list }} {% for k, v in d.d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.d.keys() | list }} {{ d.d.get('z') }} {{ d.d.get('q', 'no') }}",
            "{{ d.d | tojson }} {{ d.s | tojson }} {{ d.l | tojson(indent=2) }} {{ d.d | tojson(sort_keys=true) }}",
            "{{ d.d | tojson(separators=(',', ':')) }} {{ d.s | tojson(ensure_ascii=true) }} {{ [d.f, d.tiny, d.huge, d.big, d.none, d.t] | tojson }}",
            "{{ 'a\\tb\\u00e9\\n' | tojson }} {{ {'q': 'it\\'s'} | tojson(indent=4) }} {{ [] | tojson(indent=2) }} {{ {} | tojson }}",
            "{{ 'x\\ny\\n\\nz' | indent(3) }}|{{ 'x\\ny' | indent(2, true) }}|{{ 'x\\n\\ny' | indent(2, blank=true) }}|{{ 'p\\nq' | indent('> ') }}",
            "{{ 'a & b < c' | e }} {{ 'Title me' | lower | title }} {{ ' pad ' | upper }} {{ 'abc' | capitalize }} {{ 'a-b-c' | replace('-', '+', 1) }}",
            # Tests.
            "{{ d.n is defined }} {{ d.q is defined }} {{ d.q is undefined }} {{ d.none is none }} {{ d.s is string }} {{ d.n is number }} {{ d.f is float }} {{ d.n is integer }}",
            "{{ d.d is mapping }} {{ d.l is iterable }} {{ d.s is sequence }} {{ d.l is sequence }} {{ d.n is even }} {{ d.n is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }}",
            "{{ d.t is true }} {{ d.t is boolean }} {{ d.n is not none }} {{ 'A' is upper }} {{ 'a' is lower }} {{ 3 is eq 3 }} {{ 3 is gt 2 }} {{ 'x' is in 'xyz' }}",
            # Loops.
            "{% for p in d.people %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.length }}{{ '!' if loop.first }}{{ '$' if loop.last }} {% endfor %}",
            "{% for p in d.people %}[{{ loop.previtem.name if loop.previtem is defined else '-' }}<{{ p.name }}>{{ loop.nextitem.name if loop.nextitem is defined else '-' }}]{% endfor %}",
            "{% for x in d.l if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
            "{% for x in d.l %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}|{% for x in d.l %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
            "{% for row in d.nested %}{% for x in row %}{{ loop.index }}{{ x }}{% endfor %};{% endfor %} {% for a, b in d.nested %}{{ a + b }} {% endfor %}",
            "{% for c in 'h日👍' %}[{{ c }}]{% endfor %} {% for k in d.d %}{{ k }}{% endfor %} {% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(5, 0, -2) %}{{ i }}{% endfor %}",
            "{% for x in d.l %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
            # Scoping and assignment.
            "{% set x = 1 %}{% for i in d.l %}{% set x = i %}{% endfor %}{{ x }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}",
            "{% for i in [1, 2] %}[{{ z }}]{% set z = i %}[{{ z }}]{% endfor %}|{{ z }}",
            "{% set ns = namespace(total=0, seen=[]) %}{% for i in d.l %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}",
            "{% set a, b = 1, 'two' %}{{ a }}{{ b }} {% set t = (1, 2) %}{{ t }} {% set block %}in{{ d.n }}side{% endset %}{{ block }}",
            "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', punct='?') }} {{ greet(name='Cy') }}",
            "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inner {{ d.n }}{% endcall %}",
            "{% set l2 = d.l + [9] %}{{ l2 }} {{ d.l }} {% set dd = dict(a=1, b=d.n) %}{{ dd }} {{ namespace(x=1).x }}",
            "{% set ns = namespace(a=1, b=[1, 'x']) %}{{ ns }} {% set ns.self = ns %}{{ ns.a }} {{ (1, 'a') }} {{ (1,) }} {{ () }}",
            # Whitespace control with trim_blocks and lstrip_blocks.
            "a\n  {% if true %}\n  b\n  {% endif %}\nc",
            "a\n  {%+ if true %}\n  b\n  {%- endif %}\nc\n",
            "x  {{- ' y ' -}}  z\n{# a comment #}\n  {#- another -#}  w\n\n",
            "{% for i in d.l %}\n  {{ i }}\n{% endfor %}\n",
            "line1\n    {% set q = 1 %}    trailing\n{{ q }}  {% if q %}yes{% endif %}  \n",
            "{% if true -%}\n\n   kept {%- endif %}  \n{%+ if true +%}\nx{% endif +%}\n",
            "\r\n{{ 'crlf' }}\r\n{% if true %}\r\nin\r\n{% endif %}\r\n",
            # Strings in templates: escapes and adjacent literals.
            "{{ 'tab\\there' }}|{{ \"dq 'sq'\" }}|{{ 'a' 'b' \"c\" }}|{{ '\\u00fc\\x41\\q' }}|{{ 'x\\\\y' }}",
        ]
        raising = [
            "{{ d.missing.attr }}", "{{ 1 + 'a' }}", "{{ none_at_all() }}", "{{ d.l.append(1) }}",
            "{% for i in d.n %}{% endfor %}", "{{ raise_exception('stop: ' ~ d.n) }}", "{{ d.n / 0 }}",
            "{{ 'x\\N' }}", "{{ 'unterminated }}", "{% for x in %}{% endfor %}", "{% endif %}",
        ]
        path = os.path.join(self.dir, "battery")
        os.makedirs(path, exist_ok=True)
        messages = [{"role": "user", "content": "c", "data": data}]
        checked = 0
        for template in cases + raising:
            source = "{% set d = messages[0].data %}" + template
            with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump({"bos_token": "<s>", "eos_token": "</s>", "chat_template": source}, f, ensure_ascii=False)
            try:
                want = _compile_jinja_template(source).render(
                    messages=messages, tools=None, documents=None, add_generation_prompt=False, bos_token="<s>",
                    eos_token="</s>")
            except Exception as e:  # noqa: BLE001 - any Jinja error: tessera must refuse too
                want = e
            r = tessera("data", "render-chat", "--tokenizer", path, "-", stdin=json.dumps({"messages": messages}) + "\n")
            if isinstance(want, Exception):
                self.assertIn(template, raising, f"Jinja raised {want!r} for {template!r}")
                self.assertNotEqual(r.returncode, 0, f"{template!r}: Jinja raised {want!r}, tessera printed {r.stdout}")
                continue
            self.assertNotIn(template, raising, f"Jinja rendered {template!r}")
            self.assertEqual(r.returncode, 0, f"{template!r}: {r.stderr}")
            self.assertEqual(json.loads(r.stdout)["text"], want, f"template {template!r}")
            checked += 1
        self.assertEqual(checked, len(cases))


if __name__ == "__main__":
    unittest.main()
