"""Images in chat requests through the whole stack (frontend, worker, llama.cpp backend with a projector), with
the official `openai` SDK.

No small vision model is packaged on the registries these machines reach, so the model here is generated: the
tiny random-weight llama (`tiny_gguf`) and a random-weight CLIP projector built for it (`tiny_mmproj`). Its
answers are noise, but the whole path is real: the frontend decodes or fetches the image, the worker's backend
encodes it with llama.cpp's multimodal library into the model's context, and the reply depends on the image.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionContentPartParam, ChatCompletionMessageParam

from corral.models.tiny_gguf import write_tiny_llama
from corral.models.tiny_mmproj import IMAGE_TOKENS, write_tiny_mmproj
from support.cluster import Cluster
from support.images import data_url, png

pytestmark = pytest.mark.slow

VISION, TEXT = "tiny-vision", "tiny-text"
RED, PATTERN = png(24, 24, (255, 0, 0)), png(40, 30, seed=3)


class _Images(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/red.png":
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(RED)))
            self.end_headers()
            self.wfile.write(RED)
        elif self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/red.png")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_error(404)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def image_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def cluster(
    state_root: Path, make_database: Callable[[], str], nats_url: str, image_server: int
) -> Iterator[Cluster]:
    pytest.importorskip("llama_cpp")
    c = Cluster(root=state_root / "e2e-vision", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    write_tiny_llama(c.models_dir / "tiny.gguf")
    write_tiny_mmproj(c.models_dir / "tiny-mmproj.gguf")
    engine = "backend: llama-cpp\ncontext_size: 512\nparameters:\n  model: tiny.gguf\n"
    (c.models_dir / f"{VISION}.yaml").write_text(f"name: {VISION}\n{engine}mmproj: tiny-mmproj.gguf\n")
    (c.models_dir / f"{TEXT}.yaml").write_text(f"name: {TEXT}\n{engine}")
    yield from c.serving(
        "w1",
        frontend_args=(
            "--image-url-hosts",
            f"localhost:{image_server}",
            "--image-max-count",
            "2",
            "--image-max-bytes",
            "8KiB",
        ),
    )


@pytest.fixture(scope="module")
def client(cluster: Cluster) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{cluster.frontend_url}/v1", api_key="unused", max_retries=0, timeout=120
    ) as sdk:
        yield sdk


def _ask(*urls: str, text: str = "what is this?") -> list[ChatCompletionMessageParam]:
    parts: list[ChatCompletionContentPartParam] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return [{"role": "user", "content": parts}]


def _chat(
    client: openai.OpenAI, messages: list[ChatCompletionMessageParam], model: str = VISION, **extra: Any
) -> Any:
    return client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0, **extra
    )


def _first_logprob(reply: Any) -> float:
    return float(reply.choices[0].logprobs.content[0].logprob)


def _error(cluster: Cluster, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = httpx.post(f"{cluster.frontend_url}/v1/chat/completions", json=body, timeout=60)
    return response.status_code, response.json()["error"]


def test_an_image_fills_the_prompt_with_its_tokens_and_changes_the_answer(client: openai.OpenAI) -> None:
    text_only = _chat(client, _ask(), logprobs=True)
    red = _chat(client, _ask(data_url(RED)), logprobs=True)
    pattern = _chat(client, _ask(data_url(PATTERN)), logprobs=True)
    assert red.usage.prompt_tokens == text_only.usage.prompt_tokens + IMAGE_TOKENS
    assert (
        pattern.usage.prompt_tokens == red.usage.prompt_tokens
    )  # every image is resized to the encoder's size
    assert len({_first_logprob(text_only), _first_logprob(red), _first_logprob(pattern)}) == 3
    again = _chat(client, _ask(data_url(RED)), logprobs=True)  # after other prompts: the same answer
    assert again.choices[0].message.content == red.choices[0].message.content
    assert _first_logprob(again) == _first_logprob(red)


def test_two_images_in_one_request_and_a_streamed_reply(client: openai.OpenAI) -> None:
    one = _chat(client, _ask(data_url(RED)))
    two = _chat(client, _ask(data_url(RED), data_url(PATTERN)))
    assert two.usage.prompt_tokens == one.usage.prompt_tokens + IMAGE_TOKENS
    stream = _chat(client, _ask(data_url(RED), data_url(PATTERN)), stream=True)
    assert (
        "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        == two.choices[0].message.content
    )


def test_an_allowed_https_host_is_fetched_and_others_are_refused(
    client: openai.OpenAI, cluster: Cluster, image_server: int
) -> None:
    fetched = _chat(client, _ask(f"http://localhost:{image_server}/red.png"), logprobs=True)
    inline = _chat(client, _ask(data_url(RED)), logprobs=True)
    assert fetched.choices[0].message.content == inline.choices[0].message.content
    assert _first_logprob(fetched) == _first_logprob(inline)

    status, error = _error(
        cluster, {"model": VISION, "messages": _ask(f"http://127.0.0.1:{image_server}/red.png")}
    )
    assert (status, error["code"], error["param"]) == (
        403,
        "image_url_not_allowed",
        "messages[0].content[1].image_url.url",
    )
    assert "CORRAL_IMAGE_URL_HOSTS" in error["message"]
    status, error = _error(
        cluster, {"model": VISION, "messages": _ask(f"http://localhost:{image_server}/moved")}
    )
    assert (status, error["code"]) == (400, "image_fetch_failed") and "redirect" in error["message"]
    status, error = _error(cluster, {"model": VISION, "messages": _ask("file:///etc/passwd")})
    assert (status, error["param"]) == (400, "messages[0].content[1].image_url.url")


def test_a_model_without_a_projector_refuses_images_by_name(cluster: Cluster, client: openai.OpenAI) -> None:
    status, error = _error(cluster, {"model": TEXT, "messages": _ask(data_url(RED))})
    assert (status, error["code"], error["param"]) == (
        400,
        "model_not_vision",
        "messages[0].content[1].image_url",
    )
    assert TEXT in error["message"] and "mmproj" in error["message"]
    assert _chat(client, _ask(), model=TEXT).choices[0].message.content is not None  # text alone still works


@pytest.mark.parametrize(
    ("url", "param", "words"),
    [
        ("data:image/png;base64,!!!not-base64", "messages[0].content[1].image_url.url", "not valid base64"),
        ("data:image/png," + "x" * 10, "messages[0].content[1].image_url.url", "must be base64"),
        (data_url(b"hello, not an image"), "messages[0].content[1].image_url", "not PNG, JPEG, GIF or BMP"),
        (
            data_url(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40),
            "messages[0].content[1].image_url",
            "CORRAL_IMAGE_MAX_BYTES",
        ),
    ],
)
def test_bad_images_are_refused_before_any_inference(
    cluster: Cluster, url: str, param: str, words: str
) -> None:
    status, error = _error(cluster, {"model": VISION, "messages": _ask(url)})
    assert (status, error["param"]) == (400, param)
    assert words in error["message"]


def test_the_count_cap_a_marker_in_text_and_other_part_types(cluster: Cluster) -> None:
    status, error = _error(cluster, {"model": VISION, "messages": _ask(*[data_url(RED)] * 3)})
    assert (status, error["param"]) == (400, "messages") and "CORRAL_IMAGE_MAX_COUNT" in error["message"]
    status, error = _error(
        cluster, {"model": VISION, "messages": _ask(data_url(RED), text="a <__media__> b")}
    )
    assert (status, error["param"]) == (400, "messages[0].content[0].text")
    audio = [
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}
    ]
    status, error = _error(cluster, {"model": VISION, "messages": audio})
    assert (status, error["param"]) == (400, "messages[0].content[0].type")
    status, error = _error(
        cluster, {"model": VISION, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
    )
    assert status == 400 and error["param"].startswith("messages")
