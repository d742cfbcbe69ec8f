"""The API's inputs read without building a serializer take exactly what the
serializer takes, and read it the same way."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryadmin.api import serializers as api_serializers
from memoryadmin.api import session_serializers as agent_serializers
from memoryadmin.api.serializers import StrictSerializer, _plain_fields, _plainly_valid

PLAIN = sorted(
    (
        c
        for module in (agent_serializers, api_serializers)
        for c in vars(module).values()
        if inspect.isclass(c) and issubclass(c, StrictSerializer) and c is not StrictSerializer
        if _plain_fields(c) is not None
    ),
    key=lambda c: c.__name__,
)

strings = st.one_of(
    st.sampled_from(["", "x", "enabled", "review", "a\x00b", "\ud800", "y" * 257]),
    st.text(max_size=8),
)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), strings),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["text", "title", "other"]), inner, max_size=2),
    ),
    max_leaves=6,
)


def _body(serializer_class: type[StrictSerializer]) -> st.SearchStrategy[dict[str, Any]]:
    names = [*serializer_class().fields, "unknown"]
    return st.dictionaries(st.sampled_from(names), values, max_size=len(names))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def test_the_hot_inputs_are_read_without_a_serializer() -> None:
    names = {c.__name__ for c in PLAIN}
    assert {
        "RecallInput",
        "DocumentReplaceInput",
        "DocumentCreateInput",
        "ToolCallInput",
        "SessionCreateInput",
    } <= names


@pytest.mark.parametrize("serializer_class", PLAIN, ids=lambda c: c.__name__)
@given(data=st.data())
def test_what_the_fast_path_takes_the_serializer_takes_alike(
    serializer_class: type[StrictSerializer], data: st.DataObject
) -> None:
    body = data.draw(_body(serializer_class))
    plain = _plain_fields(serializer_class)
    assert plain is not None
    if not _plainly_valid(plain, body):
        return
    serializer = serializer_class(data=body)
    assert serializer.is_valid(), (body, serializer.errors)
    assert _plain(dict(serializer.validated_data)) == {n: body[n] for n in plain if n in body}


@pytest.mark.parametrize(
    ("body", "fast"),
    [
        ({}, True),
        ({"use": ["notes"], "input": {"text": "what next"}, "requestId": "req-1"}, True),
        ({"input": {"text": None}, "use": []}, True),
        ({"requestId": "r" * 257}, False),
        ({"requestId": ""}, False),
        ({"use": [""]}, False),
        ({"use": "notes"}, False),
        ({"input": {"text": "x", "more": 1}}, False),
        ({"input": None}, False),
        ({"input": {"text": "a\x00b"}}, False),
    ],
)
def test_a_recall_body_is_taken_by_the_fast_path_or_refused_by_the_serializer(
    body: dict[str, Any], fast: bool
) -> None:
    plain = _plain_fields(agent_serializers.RecallInput)
    assert plain is not None
    assert _plainly_valid(plain, body) is fast
    assert agent_serializers.RecallInput(data=body).is_valid() is fast
