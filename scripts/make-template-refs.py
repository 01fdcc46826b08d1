#!/usr/bin/env python3
"""Records how transformers renders a chat template, for the suite to hold minfer's own
rendering against (tests/suite/chat.rs).

usage: PYTHONPATH=<transformers' folder> scripts/make-template-refs.py TEMPLATE OUT.json

TEMPLATE is a Jinja chat template file (tests/data/templates/gemma4.jinja is Gemma 4's, as
llama.cpp 0c1e570 ships it in models/templates/google-gemma-4-31B-it.jinja). Each case below is
rendered with transformers' own renderer (`render_jinja_template`, the code under
`apply_chat_template`), with bos_token "<bos>" and eos_token "<eos>".
"""
import json
import sys

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

template_path, out = sys.argv[1:3]
source = open(template_path, encoding="utf-8").read()

weather = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
call = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
cases = [
    {"name": "one user turn", "messages": [{"role": "user", "content": "Hello"}], "tools": [], "gen": True},
    {
        "name": "system and turns",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Name a planet."},
        ],
        "tools": [],
        "gen": True,
    },
    {"name": "no generation prompt", "messages": [{"role": "user", "content": "Hi"},
                                                  {"role": "assistant", "content": "Hello."}],
     "tools": [], "gen": False},
    {"name": "tools", "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
     "tools": [weather], "gen": True},
    {
        "name": "a call and its answer",
        "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "{\"temperature\": 21}"},
        ],
        "tools": [weather],
        "gen": True,
    },
]
for c in cases:
    rendered, _ = render_jinja_template(
        conversations=[c["messages"]],
        tools=c["tools"] or None,
        chat_template=source,
        add_generation_prompt=c["gen"],
        bos_token="<bos>",
        eos_token="<eos>",
    )
    c["rendered"] = rendered[0]
json.dump(
    {"template": template_path.rsplit("/", 1)[-1], "transformers": transformers.__version__, "cases": cases},
    open(out, "w", encoding="utf-8"),
    indent=1,
    ensure_ascii=False,
)
print(f"{out}: {len(cases)} cases")
