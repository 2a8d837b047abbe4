"""Image parts of chat requests, the pure part (frontend/inference/images.py): data URLs, formats, caps, allowed hosts."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from corral.frontend.errors import APIError
from corral.frontend.inference.images import (
    MEDIA_MARKER,
    ImagePolicy,
    content_text,
    image_parts,
    request_images,
)
from corral.frontend.inference.schemas import ChatCompletionRequest
from corral.models.artifacts import ArtifactPaths
from corral.models.config import ModelConfig
from support.images import data_url, png

POLICY = ImagePolicy(max_bytes=4096, max_count=2, url_hosts=frozenset({"images.example", "cdn.example:8443"}))


def _body(*urls: str, text: str = "look") -> ChatCompletionRequest:
    parts = [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": parts}]}
    )


def _config(vision: bool = True) -> ModelConfig:
    return ModelConfig(
        name="m",
        backend="llama-cpp",
        model="m.gguf",
        models_dir=Path("/models"),
        artifacts=ArtifactPaths(scalars=(("MMProj", "p.gguf"),) if vision else ()),
    )


def _images(
    body: ChatCompletionRequest, cfg: ModelConfig | None = None, policy: ImagePolicy = POLICY
) -> list[str]:
    return asyncio.run(request_images(cfg or _config(), body.messages, policy))


def _refusal(
    body: ChatCompletionRequest, cfg: ModelConfig | None = None, policy: ImagePolicy = POLICY
) -> APIError:
    with pytest.raises(APIError) as caught:
        _images(body, cfg, policy)
    return caught.value


def test_an_image_part_is_marked_in_the_text_and_passed_in_order() -> None:
    red, blue = png(2, 2, (255, 0, 0)), png(2, 2, (0, 0, 255))
    body = _body(data_url(red), data_url(blue))
    assert body.messages[0].text() == f"look{MEDIA_MARKER}{MEDIA_MARKER}"
    assert [p for p, _ in image_parts(body.messages)] == [
        "messages[0].content[1].image_url",
        "messages[0].content[2].image_url",
    ]
    assert [base64.b64decode(i) for i in _images(body)] == [red, blue]
    assert content_text("plain") == "plain" and content_text(None) == ""


def test_a_text_only_request_reads_no_image_even_for_a_text_model() -> None:
    assert _images(_body(), _config(vision=False)) == []


@pytest.mark.parametrize(
    ("url", "param", "words"),
    [
        ("data:image/png;base64,@@@", "messages[0].content[1].image_url.url", "not valid base64"),
        ("data:image/png,abc", "messages[0].content[1].image_url.url", "must be base64"),
        (data_url(b"GIF87a" + b"\0" * 5000), "messages[0].content[1].image_url", "CORRAL_IMAGE_MAX_BYTES"),
        (data_url(b"RIFF....WEBPVP8 "), "messages[0].content[1].image_url", "not PNG, JPEG, GIF or BMP"),
        ("ftp://images.example/a.png", "messages[0].content[1].image_url.url", "neither a data: URL"),
        ("http://evil.example/a.png", "messages[0].content[1].image_url.url", "CORRAL_IMAGE_URL_HOSTS"),
        (
            "https://cdn.example/a.png",
            "messages[0].content[1].image_url.url",
            "CORRAL_IMAGE_URL_HOSTS",
        ),  # port 443
        ("http://images.example:notaport/a.png", "messages[0].content[1].image_url.url", "port"),
    ],
)
def test_bad_images_are_refused_naming_the_part(url: str, param: str, words: str) -> None:
    error = _refusal(_body(url))
    assert (error.status, error.param) in {(400, param), (403, param)}
    assert words in error.message


def test_caps_the_model_and_the_marker() -> None:
    red = data_url(png(2, 2, (255, 0, 0)))
    error = _refusal(_body(red, red, red))
    assert error.param == "messages" and "CORRAL_IMAGE_MAX_COUNT" in error.message
    error = _refusal(_body(red), _config(vision=False))
    assert (error.code, error.param) == ("model_not_vision", "messages[0].content[1].image_url")
    assert "'m'" in error.message and "mmproj" in error.message
    error = _refusal(_body(red, text=f"x {MEDIA_MARKER}"))
    assert error.param == "messages[0].content[0].text"


def test_a_wildcard_still_refuses_private_and_loopback_addresses() -> None:
    wildcard = ImagePolicy(url_hosts=frozenset({"*"}))
    for url in (
        "http://127.0.0.1/a.png",
        "http://10.1.2.3/a.png",
        "http://[::1]/a.png",
        "http://169.254.169.254/x",
    ):
        error = _refusal(_body(url), policy=wildcard)
        assert (error.status, error.code) == (403, "image_url_not_allowed"), url
        assert "list it by name" in error.message


def test_all_images_together_stay_under_what_one_backend_call_carries() -> None:
    big = data_url(b"BM" + bytes(9 << 20))  # 9 MiB each, under the per-image cap; four are 48 MiB of base64
    error = _refusal(_body(big, big, big, big), policy=ImagePolicy(max_bytes=10 << 20, max_count=8))
    assert error.param == "messages[0].content[4].image_url" and "one backend call carries" in error.message
