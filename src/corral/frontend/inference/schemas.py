"""OpenAI request bodies (and the Jina-shaped rerank body). A body's top-level fields are checked first
against its endpoint's list (`request_fields`): a field corral does not read is a 400 naming it, never
ignored, except the few that cannot change the answer.

Every number is bounded to what its protobuf field holds (`bounds`); string sizes are bounded by the
inference body limit (`limits`, CORRAL_INFERENCE_MAX_BODY), which stays below the gRPC message limit.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from corral.frontend.bounds import (
    NAME_MAX,
    PROMPTS_MAX,
    RERANK_DOCUMENTS_MAX,
    RERANK_TEXT_MAX,
    Int32,
    LogitBias,
    ModelName,
    Penalty,
    PositiveInt32,
    Probability,
    RerankText,
    RerankTopN,
    Temperature,
    TokenId,
    TopLogprobs,
)
from corral.frontend.inference import images, request_fields

TokenIds = Annotated[list[TokenId], Field(min_length=1)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")  # nested objects; a whole body is checked by `_Request`


class _Request(_Body):
    """A whole request body: fields outside `accepted_fields` are refused or passed by `field_policy`."""

    field_policy: ClassVar[request_fields.FieldPolicy | None] = None
    accepted_fields: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.field_policy is not None:
            cls.accepted_fields = cls.field_policy.accepted(cls.model_fields)

    @model_validator(mode="before")
    @classmethod
    def _known_fields_only(cls, data: Any) -> Any:
        cls._refuse_unknown_fields(data)
        return data

    @classmethod
    def _refuse_unknown_fields(cls, data: Any) -> None:
        if cls.field_policy is not None and type(data) is dict and not data.keys() <= cls.accepted_fields:
            cls.field_policy.refuse(data, cls.accepted_fields)


class ImageURL(_Body):
    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None  # the engine sees the image at its own resolution


class ContentPart(_Body):
    type: str
    text: str | None = None
    image_url: ImageURL | None = None  # type "image_url": read by images.request_images

    @model_validator(mode="after")
    def _image_part_has_url(self) -> ContentPart:
        if self.type == "image_url" and self.image_url is None:
            raise ValueError('an image_url part needs image_url: {"url": "data:image/png;base64,..."}')
        return self


MAX_TOOLS = 128


class FunctionCall(_Body):
    name: str = Field(max_length=NAME_MAX)
    arguments: str = ""


class ToolCallItem(_Body):
    id: str = Field(default="", max_length=NAME_MAX)
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionDef(_Body):
    name: str = Field(min_length=1, max_length=NAME_MAX)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)


class ToolDef(_Body):
    type: Literal["function"] = "function"
    function: FunctionDef


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = Field(default=None, max_length=NAME_MAX)
    tool_calls: list[ToolCallItem] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_call_id: str | None = Field(default=None, max_length=NAME_MAX)

    def text(self) -> str:
        """The content as the prompt reads it: text parts joined, each image part as the media marker."""
        return images.content_text(self.content)


class StreamOptions(_Body):
    include_usage: bool = False


class JSONSchemaFormat(_Body):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str = Field(default="response", max_length=NAME_MAX)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None  # the grammar always holds the reply to the schema


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class _Sampling(_Request):
    model: ModelName
    max_tokens: PositiveInt32 | None = None  # PredictOptions.Tokens is an int32
    response_format: ResponseFormat | None = None  # these three: the output's grammar (structured_output)
    grammar: str | None = None  # GBNF, as the reference takes it
    grammar_json_functions: dict[str, Any] | None = None  # the reference's JSON Schema of function calls
    temperature: Temperature | None = None
    top_p: Probability | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: Int32 | None = None  # PredictOptions.Seed is an int32
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: PositiveInt32 = 1  # at most CORRAL_MAX_N (checked by the route: a setting)
    logit_bias: dict[str, LogitBias] | None = None  # token id (a decimal string, as JSON keys are) -> bias

    @field_validator("logit_bias")
    @classmethod
    def _token_id_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            if not (key.isascii() and key.isdigit() and int(key) < 1 << 31):
                raise ValueError(f"keys are token ids (0..2147483647, as decimal strings), got {key[:40]!r}")
        return value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ChatCompletionRequest(_Sampling):
    field_policy = request_fields.CHAT

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: PositiveInt32 | None = None
    tools: list[ToolDef] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # true: an array of calls may come; absent or false: one call
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None

    @field_validator("top_logprobs")  # runs only when the field is sent: nothing per plain request
    @classmethod
    def _top_logprobs_need_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise PydanticCustomError(
                "invalid_value", "{message}", {"message": "needs logprobs: true", "param": "top_logprobs"}
            )
        return value

    def several_or_logprobs(self) -> bool:
        """Whether the request leaves the lean path of one choice without logprobs."""
        return self.n != 1 or self.logprobs

    @model_validator(mode="before")
    @classmethod
    def _known_fields_only(cls, data: Any) -> Any:
        """The base's check, after the content parts' (one validator: one call out of pydantic-core a request)."""
        if type(data) is dict and type(messages := data.get("messages")) is list:
            request_fields.refuse_non_text_parts(messages)
        cls._refuse_unknown_fields(data)
        return data

    def max_output_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    field_policy = request_fields.COMPLETIONS

    # one text, texts, one prompt of token ids, or prompts of token ids
    prompt: (
        str
        | Annotated[list[str], Field(min_length=1, max_length=PROMPTS_MAX)]
        | TokenIds
        | Annotated[list[TokenIds], Field(min_length=1, max_length=PROMPTS_MAX)]
    )
    echo: bool = False
    logprobs: TopLogprobs | None = None  # the chosen token's logprob and this many alternatives per token

    def prompts(self) -> list[str | list[int]]:
        """Each prompt: a text, or token ids."""
        value = self.prompt
        if isinstance(value, str) or (value and isinstance(value[0], int)):
            return [value]
        return list(value)  # type: ignore[arg-type]


class EmbeddingRequest(_Request):
    field_policy = request_fields.EMBEDDINGS

    model: ModelName
    input: str | list[str] | TokenIds | list[TokenIds] = Field(
        min_length=1
    )  # texts or token ids, one or many
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: PositiveInt32 | None = None  # the first `dimensions` values, renormalised to unit length

    def inputs(self) -> list[str | list[int]]:
        value = self.input
        if isinstance(value, str) or isinstance(value[0], int):
            return [value]
        return list(value)


class RerankRequest(_Request):
    """`POST /v1/rerank` (the reference's Jina shape): rank `documents` by relevance to `query`."""

    field_policy = request_fields.RERANK

    model: ModelName
    query: str = Field(min_length=1, max_length=RERANK_TEXT_MAX)
    documents: list[RerankText] = Field(min_length=1, max_length=RERANK_DOCUMENTS_MAX)
    top_n: RerankTopN | None = None  # the best `top_n` documents; 0 or absent: all of them
    return_documents: bool = True
