"""An agent loop on OpenAI Chat Completions, with memory tools (scripted model, offline).

With `make run` going: .venv/bin/python examples/openai_chat.py
For a real model: model = openai.OpenAI().chat.completions, and create(model=...).
"""

import sys

from scripted import QUESTION, ScriptedOpenAIChat, connect, run

from memoryadmin_client import dispatch, tools_for


def main(argv: list[str] | None = None) -> int:
    session = connect(argv, __doc__)
    model = ScriptedOpenAIChat()
    messages: list[dict] = [{"role": "system"}, {"role": "user", "content": QUESTION}]
    while True:
        session.recall(QUESTION)  # before each model request: current memory, fresh tools
        messages[0]["content"] = session.instructions()
        response = model.create(tools=tools_for(session, format="openai"), messages=messages)
        message = response["choices"][0]["message"]
        messages.append(message)
        if not message["tool_calls"]:
            break
        for call in message["tool_calls"]:
            messages.append(dispatch(session, call))
            print(f"{call['function']['name']} -> {messages[-1]['content']}")
    print(message["content"])
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
