"""An agent loop on the OpenAI Responses API, with memory tools (scripted model, offline).

With `make run` going: .venv/bin/python examples/openai_responses.py
For a real model: model = openai.OpenAI().responses, and create(model=...).
"""

import sys

from scripted import QUESTION, ScriptedOpenAIResponses, connect, run

from memoryadmin_client import dispatch, tools_for


def main(argv: list[str] | None = None) -> int:
    session = connect(argv, __doc__)
    model = ScriptedOpenAIResponses()
    items: list[dict] = [{"role": "user", "content": QUESTION}]
    while True:
        session.recall(QUESTION)  # before each model request: current memory, fresh tools
        response = model.create(
            instructions=session.instructions(),
            tools=tools_for(session, format="openai-responses"),
            input=items,
        )
        items += response["output"]
        calls = [item for item in response["output"] if item["type"] == "function_call"]
        if not calls:
            break
        for call in calls:
            items.append(dispatch(session, call))
            print(f"{call['name']} -> {items[-1]['output']}")
    print(response["output"][-1]["content"])
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
