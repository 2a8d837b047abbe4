"""What a request field may hold: the ranges of the wire (protobuf int32, float) and of the columns
(varchar(N), bigint) it ends up in. A value outside them is a 400 naming the field and the range,
never a ValueError from protobuf or a DataError from PostgreSQL.

The numeric types carry their range into the OpenAPI schema (`minimum`/`maximum`, so the
schema-driven fuzz test knows it) and answer with both bounds in one message:
`invalid request: field 'max_tokens': must be between 1 and 2147483647`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, StringConstraints
from pydantic_core import PydanticCustomError

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1  # protobuf int32 (PredictOptions.Tokens, Seed, …)
INT64_MAX = (1 << 63) - 1  # PostgreSQL bigint (node memory and disk sizes)
NAME_MAX = 255  # varchar(255): model names, node names, addresses, key names
NODE_ID_MAX = 36  # varchar(36): a UUID
LABEL_KEY_MAX = 128  # node_labels.key varchar(128)
LABEL_VALUE_MAX = 255  # node_labels.value varchar(255)
LABELS_MAX = 256  # labels in one request: a worker advertises a handful
REPLICAS_PER_MODEL_MAX = 1024  # max_replicas_per_model, registered or set by an admin
TOKEN_MAX = 4096  # a presented secret: only ever hashed, bounded so it cannot be a payload
RERANK_DOCUMENTS_MAX = 1024  # documents in one /v1/rerank call: one gRPC message, one batch of embeddings
RERANK_TEXT_MAX = 65536  # characters of a rerank query or document (the model reads only its first tokens)
TOP_LOGPROBS_MAX = 20  # OpenAI's bound on alternatives per token (chat top_logprobs, completions logprobs)
LOGIT_BIAS_MAX = 100  # OpenAI's: a bias is -100..100 (-100 bans a token, 100 forces it)
PROMPTS_MAX = 256  # prompts in one batched /v1/completions call (each one a backend call per choice)


def _within(low: int | float, high: int | float, what: str = "") -> Callable[[Any], Any]:
    """Runs before coercion too: 1e20 for an int field is "out of range", not "cannot parse". (`int | float`, not
    `float`: compiled (corral/native.py), a `float` parameter turns 1 into 1.0, and the message would say so.)"""

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return value  # the type check that follows names what is wrong
        if not low <= value <= high or (isinstance(value, float) and not math.isfinite(value)):
            raise PydanticCustomError("out_of_range", f"must be {what}between {low} and {high}")
        return value

    return check


def _schema(low: int | float, high: int | float) -> Any:
    return Field(json_schema_extra={"minimum": low, "maximum": high})


_tokens = _within(1, INT32_MAX)
_int32 = _within(INT32_MIN, INT32_MAX)
_bytes = _within(0, INT64_MAX)
_replicas = _within(0, REPLICAS_PER_MODEL_MAX)
_override = _within(1, REPLICAS_PER_MODEL_MAX)
_temperature = _within(0, 2, "a finite number ")
_probability = _within(0, 1, "a finite number ")
_penalty = _within(-2, 2, "a finite number ")
_top_n = _within(0, RERANK_DOCUMENTS_MAX)
_token_id = _within(0, INT32_MAX)
_top_logprobs = _within(0, TOP_LOGPROBS_MAX)
_logit_bias = _within(-LOGIT_BIAS_MAX, LOGIT_BIAS_MAX, "a finite number ")

PositiveInt32 = Annotated[int, BeforeValidator(_tokens), AfterValidator(_tokens), _schema(1, INT32_MAX)]
Int32 = Annotated[int, BeforeValidator(_int32), AfterValidator(_int32), _schema(INT32_MIN, INT32_MAX)]
ByteCount = Annotated[int, BeforeValidator(_bytes), AfterValidator(_bytes), _schema(0, INT64_MAX)]
ReplicasPerModel = Annotated[
    int, BeforeValidator(_replicas), AfterValidator(_replicas), _schema(0, REPLICAS_PER_MODEL_MAX)
]
ReplicasOverride = Annotated[
    int, BeforeValidator(_override), AfterValidator(_override), _schema(1, REPLICAS_PER_MODEL_MAX)
]
Temperature = Annotated[float, BeforeValidator(_temperature), AfterValidator(_temperature), _schema(0, 2)]
Probability = Annotated[float, BeforeValidator(_probability), AfterValidator(_probability), _schema(0, 1)]
Penalty = Annotated[float, BeforeValidator(_penalty), AfterValidator(_penalty), _schema(-2, 2)]
RerankTopN = Annotated[int, BeforeValidator(_top_n), AfterValidator(_top_n), _schema(0, RERANK_DOCUMENTS_MAX)]
TokenId = Annotated[int, BeforeValidator(_token_id), AfterValidator(_token_id), _schema(0, INT32_MAX)]
TopLogprobs = Annotated[
    int, BeforeValidator(_top_logprobs), AfterValidator(_top_logprobs), _schema(0, TOP_LOGPROBS_MAX)
]
LogitBias = Annotated[
    float, BeforeValidator(_logit_bias), AfterValidator(_logit_bias), _schema(-LOGIT_BIAS_MAX, LOGIT_BIAS_MAX)
]

ModelName = Annotated[str, StringConstraints(min_length=1, max_length=NAME_MAX)]
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=LABEL_KEY_MAX)]
LabelValue = Annotated[str, StringConstraints(max_length=LABEL_VALUE_MAX)]
RerankText = Annotated[str, StringConstraints(max_length=RERANK_TEXT_MAX)]
