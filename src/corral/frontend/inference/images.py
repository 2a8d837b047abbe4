"""Image inputs of chat requests: `image_url` content parts -> `PredictOptions.Images` (issue 22 item 4).

An image part's URL is a `data:` URL (base64) or an http(s) URL that the frontend fetches, but only from a host
the operator allowed (CORRAL_IMAGE_URL_HOSTS: none by default, so a request cannot make the frontend call
into its own network). Each image is checked before any backend call: at most CORRAL_IMAGE_MAX_COUNT per
request, each at most CORRAL_IMAGE_MAX_BYTES decoded (all of them at most what one backend call carries), in a format the engine decodes (PNG, JPEG, GIF, BMP);
a fetch has CORRAL_IMAGE_FETCH_TIMEOUT, follows no redirect, and is refused for a loopback, private or
link-local address unless that host is listed by name.

The images travel as the reference carries them: base64 in `PredictOptions.Images`, in message order, each
one's place in its message's text marked by `<__media__>` (llama.cpp mtmd's default marker, also the
reference's llama.cpp backend's). A model whose config has no `mmproj` reads no image: a request with one is a
400 naming the model and the part.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from corral.frontend.errors import APIError, clip
from corral.routing.backend_client import MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from corral.frontend.inference.schemas import ChatMessage
    from corral.models.config import ModelConfig

MEDIA_MARKER = "<__media__>"
OFF_LOOP_BYTES = 1 << 20  # base64 work above this runs in a thread (about a millisecond per MiB)
IMAGES_MAX_ENCODED = MAX_MESSAGE_BYTES - (8 << 20)  # base64 of all images, with room for the rest of the call
_FORMATS = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
)


@dataclass(frozen=True)
class ImagePolicy:
    max_bytes: int = 10 << 20  # CORRAL_IMAGE_MAX_BYTES
    max_count: int = 8  # CORRAL_IMAGE_MAX_COUNT
    url_hosts: frozenset[str] = (
        frozenset()
    )  # CORRAL_IMAGE_URL_HOSTS: 'host' or 'host:port'; '*': any public host
    fetch_timeout_s: float = 10.0  # CORRAL_IMAGE_FETCH_TIMEOUT


def _bad(param: str, message: str, code: str = "invalid_value", status: int = 400) -> APIError:
    return APIError(status, message, "invalid_request_error", code, param)


def image_parts(messages: list[ChatMessage]) -> Iterator[tuple[str, str]]:
    """(param, url) of each `image_url` part, in order."""
    for i, message in enumerate(messages):
        if isinstance(message.content, list):
            for j, part in enumerate(message.content):
                if part.type == "image_url":
                    yield (
                        f"messages[{i}].content[{j}].image_url",
                        part.image_url.url if part.image_url else "",
                    )


def has_images(messages: list[ChatMessage]) -> bool:
    return any(
        part.type == "image_url" for m in messages if isinstance(m.content, list) for part in m.content
    )


def agent_refusal(cfg: ModelConfig, messages: list[ChatMessage]) -> APIError:
    param = next(image_parts(messages))[0]
    return _bad(
        param,
        f"model {cfg.name!r} answers through the agent loop (its config has `mcp:`), which does not "
        "pass images on yet; send text only",
    )


def takes_images(cfg: ModelConfig) -> bool:
    return any(field == "MMProj" for field, _ in cfg.artifacts.scalars)


async def request_images(cfg: ModelConfig, messages: list[ChatMessage], policy: ImagePolicy) -> list[str]:
    """The request's images, base64, in order; a 400 naming the part for anything corral cannot pass on."""
    parts = list(image_parts(messages))
    if not parts:
        return []
    if not takes_images(cfg):
        raise _bad(
            parts[0][0],
            f"model {cfg.name!r} does not take images (its config has no `mmproj`); send "
            "text only, or use a vision model",
            "model_not_vision",
        )
    if len(parts) > policy.max_count:
        raise _bad(
            "messages",
            f"{len(parts)} images in one request; at most {policy.max_count} are taken "
            "(CORRAL_IMAGE_MAX_COUNT raises it)",
        )
    _no_marker_in_text(messages)
    encoded, total = [], 0
    for param, url in parts:
        data = await _image_bytes(param, url, policy)
        encoded.append(await asyncio.to_thread(_b64, data) if len(data) > OFF_LOOP_BYTES else _b64(data))
        total += len(encoded[-1])
        if total > IMAGES_MAX_ENCODED:
            raise _bad(
                param,
                f"the request's images add up to more than {IMAGES_MAX_ENCODED * 3 // 4 >> 20} MiB, more "
                "than one backend call carries; send fewer or smaller images",
            )
    return encoded


def _no_marker_in_text(messages: list[ChatMessage]) -> None:
    for i, message in enumerate(messages):
        content = message.content
        texts = (
            [(f"[{j}].text", part.text or "") for j, part in enumerate(content)]
            if isinstance(content, list)
            else [("", content or "")]
        )
        for where_in, text in texts:
            if MEDIA_MARKER in text:
                where = f"messages[{i}].content{where_in}"
                raise _bad(
                    where,
                    f"the text holds {MEDIA_MARKER}, which marks where an image goes; remove it "
                    "from a request that carries images",
                )


async def _image_bytes(param: str, url: str, policy: ImagePolicy) -> bytes:
    if url.startswith("data:"):  # decoding megabytes runs off the event loop
        data = (
            await asyncio.to_thread(_data_url, param, url, policy)
            if len(url) > OFF_LOOP_BYTES
            else _data_url(param, url, policy)
        )
    elif url.startswith(("http://", "https://")):
        data = await _fetch(param, url, policy)
    else:
        raise _bad(
            f"{param}.url",
            f"{clip(url)!r} is neither a data: URL nor an http(s) URL; send the image "
            "as data:image/png;base64,...",
        )
    _check_format(param, data)
    return data


def _data_url(param: str, url: str, policy: ImagePolicy) -> bytes:
    header, comma, payload = url.partition(",")
    if not comma or not header.endswith(";base64"):
        raise _bad(f"{param}.url", "a data: URL must be base64, e.g. data:image/png;base64,iVBOR...")
    if len(payload) > (policy.max_bytes + 2) // 3 * 4 + 4:
        raise _too_big(param, policy)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"{param}.url", "the data: URL's payload is not valid base64") from None
    if len(data) > policy.max_bytes:
        raise _too_big(param, policy)
    return data


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _too_big(param: str, policy: ImagePolicy) -> APIError:
    return _bad(
        param, f"the image is larger than {policy.max_bytes} bytes (CORRAL_IMAGE_MAX_BYTES raises it)"
    )


def _check_format(param: str, data: bytes) -> None:
    if not any(data.startswith(magic) for magic, _ in _FORMATS):
        raise _bad(param, "the image is not PNG, JPEG, GIF or BMP (the formats the engine decodes)")


def _allowed(host: str, port: int, policy: ImagePolicy) -> bool | None:
    """True: listed by name; None: only through '*' (then a public address is required); False: not allowed."""
    if host in policy.url_hosts or f"{host}:{port}" in policy.url_hosts:
        return True
    return None if "*" in policy.url_hosts else False


async def _public_address(param: str, host: str, port: int) -> None:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise _bad(f"{param}.url", f"cannot resolve the image host {clip(host)!r}: {exc}") from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise _bad(
                f"{param}.url",
                f"the image host {clip(host)!r} is a private, loopback or link-local "
                "address; list it by name in CORRAL_IMAGE_URL_HOSTS to allow it",
                "image_url_not_allowed",
                403,
            )


async def _fetch(param: str, url: str, policy: ImagePolicy) -> bytes:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise _bad(f"{param}.url", "the image URL's port is not a number") from None
    allowed = _allowed(host, port, policy)
    if allowed is False:
        raise _bad(
            f"{param}.url",
            f"the frontend does not fetch images from {clip(host)!r}; send the image "
            "as a data: URL, or have the operator list the host in CORRAL_IMAGE_URL_HOSTS",
            "image_url_not_allowed",
            403,
        )
    if allowed is None:
        await _public_address(param, host, port)
    try:
        return await asyncio.wait_for(_download(param, url, policy), policy.fetch_timeout_s)
    except TimeoutError:
        raise _bad(
            f"{param}.url",
            f"fetching the image took longer than {policy.fetch_timeout_s:g}s "
            "(CORRAL_IMAGE_FETCH_TIMEOUT raises it)",
            "image_fetch_timeout",
            408,
        ) from None
    except httpx.HTTPError as exc:
        raise _bad(
            f"{param}.url", f"fetching the image failed: {clip(str(exc))}", "image_fetch_failed"
        ) from None


async def _download(param: str, url: str, policy: ImagePolicy) -> bytes:
    async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise _bad(
                    f"{param}.url",
                    f"fetching the image answered HTTP {response.status_code} (redirects are not followed)",
                    "image_fetch_failed",
                )
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > policy.max_bytes:
                    raise _too_big(param, policy)
                chunks.append(chunk)
    return b"".join(chunks)


def content_text(content: str | list[Any] | None) -> str:
    """A message's text for the prompt: text parts joined, each image part as the media marker."""
    if isinstance(content, list):
        return "".join(MEDIA_MARKER if part.type == "image_url" else (part.text or "") for part in content)
    return content or ""
