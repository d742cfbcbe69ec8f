"""An agent loop on the Anthropic Messages API, with memory tools (scripted model, offline).

With `make run` going: .venv/bin/python examples/anthropic_messages.py
For a real model: model = anthropic.Anthropic().messages, and create(model=..., max_tokens=...).
"""

import sys

from scripted import QUESTION, ScriptedAnthropic, connect, run

from memoryadmin_client import dispatch, tools_for


def main(argv: list[str] | None = None) -> int:
    session = connect(argv, __doc__)
    model = ScriptedAnthropic()
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]
    while True:
        session.recall(QUESTION)  # before each model request: current memory, fresh tools
        response = model.create(
            system=session.instructions(),
            tools=tools_for(session, format="anthropic"),
            messages=messages,
        )
        messages.append({"role": "assistant", "content": response["content"]})
        calls = [block for block in response["content"] if block["type"] == "tool_use"]
        if not calls:
            break
        for call in calls:
            messages.append(dispatch(session, call))
            print(f"{call['name']} -> {messages[-1]['content'][0]['content']}")
    print(response["content"][-1]["text"])
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
