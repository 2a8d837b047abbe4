"""Request bodies of the modality endpoints (issue 23), checked like the text ones (`request_fields`): every field
read, harmless, refused by name while not supported, or unknown (a 400 naming it).

* `/v1/audio/speech` (OpenAI) and `/tts` (the reference's): JSON.
* `/v1/images/generations` (OpenAI, with LocalAI's `step` and the usual `seed`, `negative_prompt` extensions).
* `/v1/audio/transcriptions` and `/translations`: multipart form, read by `transcription_form`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, field_validator
from starlette.datastructures import FormData, UploadFile

from corral.frontend.bounds import Int32, ModelName
from corral.frontend.errors import UNKNOWN_PARAMETER, UNSUPPORTED_PARAMETER, APIError, clip
from corral.frontend.inference import speech_formats, transcripts
from corral.frontend.inference.request_fields import FieldPolicy
from corral.frontend.inference.schemas import _Body, _Request

SPEECH_INPUT_MAX = 4096  # characters, as OpenAI
IMAGE_PROMPT_MAX = 32000
IMAGE_SIDE_MIN, IMAGE_SIDE_MAX = 64, 2048  # pixels; multiples of 8 (the latent grid of diffusion models)
IMAGE_STEPS_MAX = 150
TRANSCRIPT_PROMPT_MAX = 4096
_SIZE = re.compile(r"^(\d{2,4})x(\d{2,4})$")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")  # an upload's name, as the worker's staging key's last segment
_LANGUAGE = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?$")

SPEECH = FieldPolicy("/v1/audio/speech", not_yet={"instructions": ("",), "stream_format": ("audio",)})
TTS = FieldPolicy("/tts")
IMAGES = FieldPolicy(
    "/v1/images/generations",
    harmless=frozenset({"user"}),
    not_yet={
        "quality": ("auto", "standard"),
        "style": (),
        "background": ("auto",),
        "moderation": ("auto",),
        "output_format": ("png",),
        "output_compression": (100,),
        "partial_images": (0,),
        "stream": (False,),
    },
)


class Voice(_Body):
    id: str = Field(min_length=1, max_length=255)


class SpeechRequest(_Request):
    field_policy = SPEECH

    model: ModelName
    input: str = Field(min_length=1, max_length=SPEECH_INPUT_MAX)
    voice: str | Voice = ""
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: Annotated[float, Field(ge=0.25, le=4.0)] = 1.0

    def voice_name(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.id

    @field_validator("response_format")
    @classmethod
    def _encodable(cls, value: str) -> str:
        if value not in speech_formats.ENCODED:
            raise ValueError(f"{value!r} has no encoder here; use one of {', '.join(speech_formats.ENCODED)}")
        return value


class TTSRequest(_Request):
    """The reference's `/tts`: WAV back."""

    field_policy = TTS

    model: ModelName
    input: str = Field(min_length=1, max_length=SPEECH_INPUT_MAX)
    voice: str = Field(default="", max_length=255)
    backend: str = Field(default="", max_length=255)  # when sent, it must be the model's own backend
    language: str = Field(default="", max_length=16)


class ImageRequest(_Request):
    field_policy = IMAGES

    prompt: str = Field(min_length=1, max_length=IMAGE_PROMPT_MAX)
    model: ModelName
    n: Annotated[int, Field(ge=1, le=10)] = 1
    size: str = "256x256"
    response_format: Literal["url", "b64_json"] = "url"
    seed: Int32 | None = None
    step: Annotated[int, Field(ge=1, le=IMAGE_STEPS_MAX)] | None = None  # LocalAI's name: inference steps
    negative_prompt: str = Field(default="", max_length=IMAGE_PROMPT_MAX)

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        match = _SIZE.match(value)
        sides = [int(side) for side in match.groups()] if match else []
        if not sides or not all(IMAGE_SIDE_MIN <= side <= IMAGE_SIDE_MAX and side % 8 == 0 for side in sides):
            raise ValueError(
                f"must be WIDTHxHEIGHT, each a multiple of 8 from {IMAGE_SIDE_MIN} to {IMAGE_SIDE_MAX} "
                "(e.g. 256x256, 512x512, 1024x1024)"
            )
        return value

    def dimensions(self) -> tuple[int, int]:
        width, height = self.size.split("x")
        return int(width), int(height)

    def prompts(self) -> tuple[str, str]:
        """(positive, negative): LocalAI's `positive|negative` in the prompt, or `negative_prompt`."""
        positive, bar, negative = self.prompt.partition("|")
        return (
            (positive, negative) if bar and not self.negative_prompt else (self.prompt, self.negative_prompt)
        )


@dataclass(frozen=True)
class TranscriptionForm:
    model: str
    audio: bytes
    filename: str
    language: str = ""
    prompt: str = ""
    response_format: str = "json"
    temperature: float = 0.0


_FORM_FIELDS = {"file", "model", "language", "prompt", "response_format", "temperature"}
_FORM_NOT_YET = {
    "timestamp_granularities[]": ("segment",),
    "timestamp_granularities": ("segment",),
    "stream": ("false",),
    "chunking_strategy": ("auto",),
    "include[]": (),
    "include": (),
    "known_speaker_names[]": (),
    "known_speaker_references[]": (),
}


def _form_error(param: str, message: str, code: str = "invalid_value") -> APIError:
    return APIError(400, message, "invalid_request_error", code, param)


def _text(form: FormData, name: str, limit: int, default: str = "") -> str:
    value = form.get(name, default)
    if not isinstance(value, str):
        raise _form_error(name, "must be a text field, not a file")
    if len(value) > limit:
        raise _form_error(name, f"must be at most {limit} characters")
    return value


def _no_stray_fields(form: FormData, endpoint: str) -> None:
    for name, value in form.multi_items():
        if name in _FORM_FIELDS:
            continue
        off = _FORM_NOT_YET.get(name)
        if off is None:
            raise _form_error(
                clip(name),
                f"unknown field; check its spelling ({endpoint} reads {', '.join(sorted(_FORM_FIELDS))})",
                UNKNOWN_PARAMETER,
            )
        if not isinstance(value, str) or value.lower() not in off:
            allowed = " or ".join(off) if off else "nothing"
            raise _form_error(
                name,
                f"corral does not support it yet; leave it out (or send {allowed})",
                UNSUPPORTED_PARAMETER,
            )


async def transcription_form(form: FormData, endpoint: str, max_bytes: int) -> TranscriptionForm:
    """The multipart body of /v1/audio/transcriptions or /translations; a 400 naming the field otherwise."""
    _no_stray_fields(form, endpoint)
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise _form_error("file", "is required: the audio file, as a multipart file part")
    audio = await upload.read(max_bytes + 1)
    if not audio:
        raise _form_error("file", "is empty; send the audio file's bytes")
    model = _text(form, "model", 255)
    if not model:
        raise _form_error("model", "is required")
    language = _text(form, "language", 16)
    if language and not _LANGUAGE.match(language):
        raise _form_error("language", "must be an ISO-639 language code, e.g. en or pt-BR")
    response_format = _text(form, "response_format", 32, "json")
    if response_format not in transcripts.FORMATS:
        raise _form_error("response_format", f"must be one of {', '.join(transcripts.FORMATS)}")
    raw_temperature = _text(form, "temperature", 32, "0")
    try:
        temperature = float(raw_temperature)
    except ValueError:
        raise _form_error("temperature", "must be a number from 0 to 1") from None
    if not 0 <= temperature <= 1:
        raise _form_error("temperature", "must be a number from 0 to 1")
    name = _SAFE_NAME.sub("_", (upload.filename or "").rsplit("/", 1)[-1])[-100:].lstrip(".") or "audio"
    return TranscriptionForm(
        model=model,
        audio=audio,
        filename=name,
        language=language,
        prompt=_text(form, "prompt", TRANSCRIPT_PROMPT_MAX),
        response_format=response_format,
        temperature=temperature,
    )
