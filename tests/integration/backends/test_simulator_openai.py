"""The simulator's OpenAI server (`python -m corral.backends.simulator_openai`): a real process, real HTTP clients
(the `openai` package and httpx). Its words are the simulator's for the same model and prompt; its streams
parse as OpenAI chunks. Run with no simulated time (the engine iterated on the event loop) and with some
(each call on a thread), the two paths the server takes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from corral.backends.simulator import simulated_words
from corral.runtime.processes import stop_process
from support.cluster import free_port

MODEL = "sim-http"


@dataclass
class Server:
    url: str
    popen: subprocess.Popen[bytes]
    log: Path

    clients: list[openai.OpenAI] = field(default_factory=list)

    def client(self) -> openai.OpenAI:
        """A client, closed with the server (its pooled connection otherwise outlives the test, unclosed)."""
        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0, timeout=30)
        self.clients.append(client)
        return client


@pytest.fixture(scope="module", params=["inline", "threaded"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    options = ["output_token_time_s:0.002", "parallel:2"] if request.param == "threaded" else []
    port = free_port()
    log = tmp_path_factory.mktemp("sim-openai") / "server.log"
    with open(log, "wb") as handle:
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "corral.backends.simulator_openai",
                "--port",
                str(port),
                "--model",
                MODEL,
                *(f"--option={option}" for option in options),
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert popen.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"not ready: {log.read_text()}"
            time.sleep(0.05)
        served = Server(url, popen, log)
        yield served
        for client in served.clients:
            client.close()
    finally:
        stop_process(popen, 10)


def test_models_lists_the_served_model(server: Server) -> None:
    models = server.client().models.list()
    assert [model.id for model in models.data] == [MODEL]
    assert models.data[0].object == "model"


def test_streamed_chat_sends_the_simulators_words_one_chunk_each(server: Server) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there"},
    ]
    stream = server.client().chat.completions.create(
        model=MODEL,
        messages=messages,
        max_completion_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant" and not chunks[0].choices[0].delta.content
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    expected = simulated_words(MODEL, "system: be brief\nuser: hello there", 6)
    assert pieces == [expected[0], *(f" {word}" for word in expected[1:])]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (4, 6, 10)


def test_stream_ends_with_done_and_sends_no_usage_unless_asked(server: Server) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert all(event.startswith("data: ") for event in events)
    assert events[-1] == "data: [DONE]"
    assert "usage" not in "".join(events)
    assert len(events) == 1 + 3 + 1 + 1  # role, three words, finish reason, [DONE]


def test_chat_without_stream_answers_one_completion(server: Server) -> None:
    answer = server.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "one two three"}], max_tokens=5
    )
    assert answer.object == "chat.completion" and answer.model == MODEL
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert choice.message.content == " ".join(simulated_words(MODEL, "user: one two three", 5))
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (3, 5)


def test_completions_stream_and_not_give_the_same_text(server: Server) -> None:
    client = server.client()
    whole = client.completions.create(model=MODEL, prompt="a b c d", max_tokens=4)
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    expected = " ".join(simulated_words(MODEL, "a b c d", 4))
    assert whole.choices[0].text == expected
    assert whole.usage is not None and whole.usage.prompt_tokens == 4
    streamed = list(client.completions.create(model=MODEL, prompt="a b c d", max_tokens=4, stream=True))
    assert "".join(chunk.choices[0].text for chunk in streamed) == expected
    assert [chunk.choices[0].finish_reason for chunk in streamed][-1] == "length"
    ids = client.completions.create(model=MODEL, prompt=[5], max_tokens=2)  # token ids: the words `#<id>`
    assert ids.choices[0].text == " ".join(simulated_words(MODEL, "#5", 2))


def test_requests_without_a_budget_get_the_frontends_default(server: Server) -> None:
    answer = server.client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert answer.usage is not None and answer.usage.completion_tokens == 256


def test_bad_requests_get_openai_errors(server: Server) -> None:
    for body in (b"not json", b"[]", b'{"model": "sim-http", "messages": []}'):
        response = httpx.post(f"{server.url}/v1/chat/completions", content=body, timeout=10)
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"
    response = httpx.post(
        f"{server.url}/v1/completions", json={"model": MODEL, "max_tokens": 0, "prompt": "x"}
    )
    assert response.status_code == 400 and "max_tokens" in response.json()["error"]["message"]
    assert httpx.get(f"{server.url}/v1/nothing", timeout=10).status_code == 404
