"""A Responses API request (`POST /v1/responses`) as the chat request it runs as.

`instructions` become a leading system message (for this request only: a follow-up does not inherit them, as
OpenAI); `input` — a string (one user message) or a list of items — becomes chat messages: a message item
(its `input_text` / `output_text` parts joined), a `function_call` item an assistant message with that tool
call (consecutive calls: one message), a `function_call_output` item a `tool` message answering its
`call_id`. Function `tools` take the chat shape (`{"type": "function", "function": {...}}`) and `tool_choice`
likewise, so the chat path's tool handling applies unchanged. Anything corral cannot read — an image or file
part, a built-in tool, a reasoning item — is a 400 naming where it is (`input[2].content[0].type`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from corral.frontend.bounds import NAME_MAX, ModelName, PositiveInt32, Probability, Temperature
from corral.frontend.errors import UNSUPPORTED_VALUE, APIError, clip
from corral.frontend.inference import request_fields
from corral.frontend.inference.schemas import MAX_TOOLS, _Request

Message = dict[str, Any]  # an OpenAI chat message, as the chat path and the stored conversation hold it

MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}  # part type → its text field
METADATA_MAX, METADATA_KEY_MAX, METADATA_VALUE_MAX = 16, 64, 512  # OpenAI's bounds on `metadata`
NESTING_MAX = 200  # levels of JSON a stored response keeps (orjson writes 255; the body parser reads 1024)


class ResponsesRequest(_Request):
    field_policy = request_fields.RESPONSES

    model: ModelName
    input: str | list[Any] = ""
    instructions: str | None = None
    max_output_tokens: PositiveInt32 | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    tools: list[Any] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    previous_response_id: str | None = Field(default=None, max_length=NAME_MAX)
    store: bool = True
    stream: bool = False
    metadata: dict[str, str] | None = Field(default=None, max_length=METADATA_MAX)


def _invalid(param: str, message: str, code: str = "invalid_value") -> APIError:
    return APIError(400, f"invalid request: field '{param}': {message}", "invalid_request_error", code, param)


def _text(value: Any, param: str, *, required: bool = True, limit: int | None = None) -> str:
    if not isinstance(value, str) or (required and not value):
        raise _invalid(param, "must be a non-empty string" if required else "must be a string")
    if limit is not None and len(value) > limit:
        raise _invalid(param, f"must be at most {limit} characters")
    return value


def _content_text(content: Any, param: str) -> str:
    """A message item's content: a string, or parts of which only text is read (images, files: a 400)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _invalid(param, "must be a string or a list of content parts")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        field = TEXT_PARTS.get(kind) if isinstance(kind, str) else None
        if field is None:
            shown = repr(clip(kind)) if isinstance(kind, str) else "a part without a string `type`"
            raise _invalid(
                f"{param}[{j}].type",
                f"corral does not support {shown} content parts; send "
                "input_text parts (images, files and audio are not read yet)",
                UNSUPPORTED_VALUE,
            )
        texts.append(_text(part.get(field), f"{param}[{j}].{field}", required=False))
    return "".join(texts)


def _message_item(item: dict[str, Any], param: str) -> Message:
    role = item.get("role")
    if role not in MESSAGE_ROLES:
        raise _invalid(f"{param}.role", f"must be one of {', '.join(sorted(MESSAGE_ROLES))}")
    return {"role": role, "content": _content_text(item.get("content"), f"{param}.content")}


def _tool_call(item: dict[str, Any], param: str) -> dict[str, Any]:
    return {
        "id": _text(item.get("call_id"), f"{param}.call_id", limit=NAME_MAX),
        "type": "function",
        "function": {
            "name": _text(item.get("name"), f"{param}.name", limit=NAME_MAX),
            "arguments": _text(item.get("arguments", ""), f"{param}.arguments", required=False),
        },
    }


def _tool_output(item: dict[str, Any], param: str, names: dict[str, str]) -> Message:
    call_id = _text(item.get("call_id"), f"{param}.call_id", limit=NAME_MAX)
    output = item.get("output")
    text = (
        _text(output, f"{param}.output", required=False)
        if isinstance(output, str)
        else _content_text(output, f"{param}.output")
    )
    return {"role": "tool", "tool_call_id": call_id, "name": names.get(call_id, ""), "content": text}


def input_messages(value: str | list[Any], history: list[Message] | None = None) -> list[Message]:
    """The chat messages of a request's `input`; `history` (the conversation it follows) names the functions
    whose calls an output answers."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}] if value else []
    names = {c["id"]: c["function"]["name"] for m in history or () for c in m.get("tool_calls") or ()}
    messages: list[Message] = []
    for i, item in enumerate(value):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise _invalid(param, "must be an object (an input item)")
        kind = item.get("type", "message")  # an easy input message may leave out its type
        if kind == "message":
            messages.append(_message_item(item, param))
        elif kind == "function_call":
            call = _tool_call(item, param)
            names[call["id"]] = call["function"]["name"]
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # one turn: its text and its calls together
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(_tool_output(item, param, names))
        else:
            shown = repr(clip(kind)) if isinstance(kind, str) else "an item without a string `type`"
            raise _invalid(
                f"{param}.type",
                f"corral does not support {shown} input items; send message, "
                "function_call and function_call_output items",
                UNSUPPORTED_VALUE,
            )
    return messages


def chat_tools(tools: list[Any]) -> list[dict[str, Any]]:
    """Function tools in the chat shape; a built-in tool (web search, files, …) is a 400 naming it."""
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            shown = repr(clip(kind)) if isinstance(kind, str) else "a tool without a string `type`"
            raise _invalid(
                f"tools[{i}].type",
                f"corral does not support {shown} tools; send function tools",
                UNSUPPORTED_VALUE,
            )
        parameters = tool.get("parameters")
        parameters = {} if parameters is None else parameters
        if not isinstance(parameters, dict):
            raise _invalid(f"tools[{i}].parameters", "must be a JSON schema object")
        out.append(
            {
                "type": "function",
                "function": {
                    "name": _text(tool.get("name"), f"tools[{i}].name", limit=NAME_MAX),
                    "description": _text(
                        tool.get("description") or "", f"tools[{i}].description", required=False
                    ),
                    "parameters": parameters,
                },
            }
        )
    return out


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") != "function":
        shown = repr(clip(choice.get("type")))
        raise _invalid(
            "tool_choice.type",
            f"corral does not support tool_choice of type {shown}; send none, auto, "
            'required or {"type": "function", "name": ...}',
            UNSUPPORTED_VALUE,
        )
    return {
        "type": "function",
        "function": {"name": _text(choice.get("name"), "tool_choice.name", limit=NAME_MAX)},
    }


def too_deep(value: Any, param: str = "", depth: int = 0) -> str | None:
    """Where `value` nests deeper than NESTING_MAX levels (None when it does not): such a body is parsed but
    could not be stored (orjson.dumps raises), so it is refused before any generation."""
    if depth > NESTING_MAX:
        return param
    children = (
        value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    )
    for key, child in children:
        where = f"{param}[{key}]" if isinstance(key, int) else f"{param}.{clip(key)}" if param else clip(key)
        if (found := too_deep(child, where, depth + 1)) is not None:
            return found
    return None


def check_nesting(body: Any) -> None:
    if (where := too_deep(body)) is not None:
        field = where if len(where) <= 2 * NAME_MAX else where[: 2 * NAME_MAX] + "…"
        raise _invalid(field, f"nests deeper than {NESTING_MAX} levels of JSON; flatten it")


def check_metadata(metadata: dict[str, str] | None) -> None:
    for key, value in (metadata or {}).items():
        if len(key) > METADATA_KEY_MAX or len(value) > METADATA_VALUE_MAX:
            raise _invalid(
                "metadata",
                f"keys may have at most {METADATA_KEY_MAX} characters and values "
                f"{METADATA_VALUE_MAX} ({clip(key)!r} has more)",
            )


def chat_body(body: ResponsesRequest, conversation: list[Message]) -> dict[str, Any]:
    """The chat completion request body that answers `body`, given its whole `conversation` (history + input)."""
    messages = (
        [{"role": "system", "content": body.instructions}] if body.instructions else []
    ) + conversation
    chat: dict[str, Any] = {"model": body.model, "messages": messages}
    if body.max_output_tokens is not None:
        chat["max_completion_tokens"] = body.max_output_tokens
    for name in ("temperature", "top_p"):
        if (value := getattr(body, name)) is not None:
            chat[name] = value
    if body.tools:
        chat["tools"] = chat_tools(body.tools)
    if (choice := chat_tool_choice(body.tool_choice)) is not None:
        chat["tool_choice"] = choice
    return chat
