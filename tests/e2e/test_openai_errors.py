"""OpenAI's error codes where clients branch on them, on real parts (frontend, worker, simulator and llama.cpp
backend processes): a prompt too long for the context is `context_length_exceeded` (before the first byte of
a stream); a request field corral does not read is a 400 naming it, never ignored; the values SDKs send by
default pass."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from corral.models.defaults import write_tiny_model_config
from support.cluster import Cluster

pytestmark = pytest.mark.slow

SIM, LLAMA, LLAMA_EMBED = "errors-sim", "errors-tiny", "errors-tiny-embed"
SIM_CONTEXT = 32  # words: the simulator's tokens
OVER_SIM = " ".join(["word"] * SIM_CONTEXT)  # exactly the context: no room for one generated token
OVER_LLAMA = "hello world " * 600  # well past the tiny model's 512-token context
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-openai-errors", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / f"{SIM}.yaml").write_text(
        f"name: {SIM}\nbackend: simulator\ncontext_size: {SIM_CONTEXT}\nparameters:\n  model: {SIM}\n"
    )
    write_tiny_model_config(c.models_dir, LLAMA)
    write_tiny_model_config(c.models_dir, LLAMA_EMBED, embeddings=True)
    yield from c.serving("w1")


def _post(cluster: Cluster, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{cluster.frontend_url}{path}", json=body, timeout=120)


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text[
        :500
    ]  # not a stream
    assert "Traceback" not in response.text
    return dict(response.json()["error"])


# --- context_length_exceeded -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, body, param",
    [
        (
            "/v1/chat/completions",
            {"model": SIM, "messages": [{"role": "user", "content": OVER_SIM}]},
            "messages",
        ),
        (
            "/v1/chat/completions",
            {"model": SIM, "messages": [{"role": "user", "content": OVER_SIM}], "stream": True},
            "messages",
        ),
        ("/v1/completions", {"model": SIM, "prompt": OVER_SIM}, "prompt"),
        ("/v1/completions", {"model": SIM, "prompt": OVER_SIM, "stream": True}, "prompt"),
        ("/v1/embeddings", {"model": SIM, "input": ["short", OVER_SIM + " more"]}, "input"),
        (
            "/v1/chat/completions",
            {"model": LLAMA, "messages": [{"role": "user", "content": OVER_LLAMA}]},
            "messages",
        ),
        (
            "/v1/chat/completions",
            {"model": LLAMA, "messages": [{"role": "user", "content": OVER_LLAMA}], "stream": True},
            "messages",
        ),  # the check is before the stream's first byte
        ("/v1/completions", {"model": LLAMA, "prompt": OVER_LLAMA}, "prompt"),
        (
            "/v1/embeddings",
            {"model": LLAMA_EMBED, "input": OVER_LLAMA},
            "input",
        ),  # llama-cpp-python would cut it
    ],
)
def test_a_prompt_longer_than_the_context_is_a_400_context_length_exceeded(
    cluster: Cluster, path: str, body: dict[str, Any], param: str
) -> None:
    response = _post(cluster, path, body)
    assert response.status_code == 400, response.text[:500]
    error = _error(response)
    assert (error["code"], error["type"], error["param"]) == (
        "context_length_exceeded",
        "invalid_request_error",
        param,
    )
    assert "context" in error["message"] and "shorten" in error["message"]


def test_a_prompt_that_leaves_room_in_the_context_is_answered(cluster: Cluster) -> None:
    fits = " ".join(["word"] * (SIM_CONTEXT - 1))
    response = _post(
        cluster,
        "/v1/chat/completions",
        {"model": SIM, "messages": [{"role": "user", "content": fits}], "max_tokens": 2},
    )
    assert response.status_code == 200, response.text[:500]


def test_the_openai_sdk_sees_context_length_exceeded(cluster: Cluster) -> None:
    client = openai.OpenAI(
        base_url=f"{cluster.frontend_url}/v1", api_key="unused", max_retries=0, timeout=120
    )
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=SIM, messages=[{"role": "user", "content": OVER_SIM}], stream=True
        )
    assert caught.value.code == "context_length_exceeded"


# --- fields corral does not read ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, fields, param",
    [
        ("/v1/chat/completions", {"store": True}, "store"),
        ("/v1/chat/completions", {"reasoning_effort": "high"}, "reasoning_effort"),
        ("/v1/chat/completions", {"modalities": ["text", "audio"]}, "modalities"),
        ("/v1/chat/completions", {"service_tier": "priority"}, "service_tier"),
        ("/v1/chat/completions", {"top_k": 40}, "top_k"),  # a vLLM / LocalAI extension
        ("/v1/completions", {"suffix": " the end"}, "suffix"),
        ("/v1/completions", {"best_of": 3}, "best_of"),
    ],
)
def test_a_field_corral_does_not_support_yet_is_a_400_naming_it(
    cluster: Cluster, path: str, fields: dict[str, Any], param: str
) -> None:
    bodies: dict[str, dict[str, object]] = {
        "/v1/chat/completions": {"model": SIM, "messages": HI},
        "/v1/completions": {"model": SIM, "prompt": "hi"},
        "/v1/embeddings": {"model": SIM, "input": "hi"},
    }
    base = bodies[path]
    response = _post(cluster, path, {**base, **fields})  # accepted and ignored before: 200
    assert response.status_code == 400, response.text[:500]
    error = _error(response)
    assert (error["code"], error["param"]) == ("unsupported_parameter", param)
    assert error["message"].startswith(
        f"invalid request: field '{param}': corral does not support it yet; leave it out"
    )


@pytest.mark.parametrize(
    "path, base",
    [
        ("/v1/chat/completions", {"model": SIM, "messages": HI}),
        ("/v1/completions", {"model": SIM, "prompt": "hi"}),
        ("/v1/embeddings", {"model": SIM, "input": "hi"}),
        ("/v1/rerank", {"model": SIM, "query": "q", "documents": ["a"]}),
    ],
)
def test_an_unknown_field_is_a_400_naming_it(cluster: Cluster, path: str, base: dict[str, Any]) -> None:
    response = _post(cluster, path, {**base, "temprature": 0.2})  # a typo looked like success before
    assert response.status_code == 400, response.text[:500]
    error = _error(response)
    assert (error["code"], error["param"]) == ("unknown_parameter", "temprature")
    assert error["message"].startswith(
        "invalid request: field 'temprature': unknown field; check its spelling"
    )


def test_an_image_for_a_model_without_a_projector_is_a_400_naming_its_place(cluster: Cluster) -> None:
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    response = _post(
        cluster,
        "/v1/chat/completions",  # the image was dropped silently before
        {
            "model": SIM,
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": content}],
        },
    )
    assert response.status_code == 400, response.text[:500]
    error = _error(response)  # images reach models with an mmproj (tests/e2e/test_vision.py)
    assert (error["code"], error["param"]) == ("model_not_vision", "messages[1].content[1].image_url")
    assert SIM in error["message"] and "mmproj" in error["message"]
    audio = [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]
    response = _post(
        cluster, "/v1/chat/completions", {"model": SIM, "messages": [{"role": "user", "content": audio}]}
    )
    assert (response.status_code, _error(response)["param"]) == (400, "messages[0].content[0].type")


# --- what SDKs send by default passes ----------------------------------------------------------------------------

DEFAULTS = {
    "n": 1,
    "logprobs": False,
    "top_logprobs": None,
    "response_format": {"type": "text"},
    "user": "u-1",
    "stream": False,
    "logit_bias": None,
    "parallel_tool_calls": True,
    "service_tier": "auto",
    "store": False,
    "metadata": {"team": "a"},
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "max_tokens": 2,
    "seed": None,
}


def test_null_and_default_values_of_unsupported_fields_pass(cluster: Cluster) -> None:
    chat = _post(cluster, "/v1/chat/completions", {"model": SIM, "messages": HI, **DEFAULTS})
    assert chat.status_code == 200, chat.text[:500]
    completion = _post(
        cluster,
        "/v1/completions",
        {
            "model": SIM,
            "prompt": "hi",
            "n": 1,
            "logprobs": None,
            "suffix": None,
            "best_of": 1,
            "echo": False,
            "user": "u-1",
        },
    )
    assert completion.status_code == 200, completion.text[:500]
    embedding = _post(
        cluster,
        "/v1/embeddings",
        {"model": SIM, "input": "hi", "dimensions": None, "user": "u-1", "encoding_format": "float"},
    )
    assert embedding.status_code == 200, embedding.text[:500]


def test_text_parts_are_read(cluster: Cluster) -> None:
    content = [{"type": "text", "text": "hello"}, {"type": "text", "text": " there"}]
    response = _post(
        cluster,
        "/v1/chat/completions",
        {"model": SIM, "messages": [{"role": "user", "content": content}], "max_tokens": 2},
    )
    assert response.status_code == 200, response.text[:500]
    assert response.json()["usage"]["prompt_tokens"] == 2  # the simulator counts words: "hello there"


def test_the_openai_sdk_default_calls_still_work(cluster: Cluster) -> None:
    client = openai.OpenAI(
        base_url=f"{cluster.frontend_url}/v1", api_key="unused", max_retries=0, timeout=120
    )
    reply = client.chat.completions.create(model=SIM, messages=[{"role": "user", "content": "hello"}])
    assert reply.choices[0].message.content
    chunks = list(
        client.chat.completions.create(
            model=SIM,
            messages=[{"role": "user", "content": "hello"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None
    assert client.completions.create(model=SIM, prompt="hello").choices[0].text
    assert client.embeddings.create(model=SIM, input="hello").data[0].embedding
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=SIM, messages=[{"role": "user", "content": "hello"}], modalities=["text", "audio"]
        )
    assert caught.value.code == "unsupported_parameter"


def _nested_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    "fields, param",
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": _nested_schema(150)},
                }
            },
            "response_format.json_schema.schema",
        ),
        ({"grammar_json_functions": _nested_schema(150)}, "grammar_json_functions"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": _nested_schema(150)}}]},
            "tools",
        ),
    ],
)
def test_a_schema_nested_past_the_json_encoder_is_a_400_naming_it(
    cluster: Cluster, fields: dict[str, Any], param: str
) -> None:
    # 300 levels of JSON: parsed (orjson reads 1024) but not encodable again (it writes 255)
    error = _error(_post(cluster, "/v1/chat/completions", {"model": SIM, "messages": HI, **fields}))
    assert (error["param"], error["code"]) == (param, "invalid_schema"), error
    assert (
        _post(cluster, "/v1/chat/completions", {"model": SIM, "messages": HI, "max_tokens": 2}).status_code
        == 200
    )
