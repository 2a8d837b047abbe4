"""Chat prompts for the llama-cpp engine: pick a formatter at load, render Messages per request.

The formatter is the model's embedded `tokenizer.chat_template` (Jinja) unless the model config
sets option `chat_format:<name>`, which selects one of llama-cpp-python's built-in
template formats (`chatml`, `gemma`, `llama-2`, `llama-3`, `mistral-instruct`, ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llama_cpp import Llama, llama_chat_format

from corral.backends.engine import InvalidRequestError, LoadError
from corral.grammar.tool_calls import ToolMode, calls_text, tool_functions
from corral.proto import backend_pb2 as pb

ChatFormatter = llama_chat_format.ChatFormatter


@dataclass(frozen=True)
class ChatPrompt:
    text: str
    add_bos: bool
    stop: tuple[str, ...]


def template_format_names() -> list[str]:
    """Built-in chat formats usable with `chat_format:` (handlers built from a plain formatter)."""
    handlers = llama_chat_format.LlamaChatCompletionHandlerRegistry()._chat_handlers
    return sorted(name for name, handler in handlers.items() if _formatter_of(handler) is not None)


def _formatter_of(handler: Any) -> ChatFormatter | None:
    code = getattr(handler, "__code__", None)
    if code is None or "chat_formatter" not in code.co_freevars:
        return None
    formatter: ChatFormatter = handler.__closure__[code.co_freevars.index("chat_formatter")].cell_contents
    return formatter


def named_formatter(name: str) -> ChatFormatter:
    handlers = llama_chat_format.LlamaChatCompletionHandlerRegistry()._chat_handlers
    formatter = _formatter_of(handlers.get(name))
    if formatter is None:
        raise LoadError(
            f"option chat_format:{name} is not a known template chat format; "
            f"use one of: {', '.join(template_format_names())}"
        )
    return formatter


def embedded_formatter(llm: Llama) -> ChatFormatter | None:
    """The GGUF's own `tokenizer.chat_template`, or None if the file has none."""
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        return None

    def special_text(token_id: int) -> str:
        if token_id < 0:
            return ""
        return llm.detokenize([token_id], special=True).decode("utf-8", errors="replace")

    try:
        return llama_chat_format.Jinja2ChatFormatter(
            template=template,
            eos_token=special_text(llm.token_eos()),
            bos_token=special_text(llm.token_bos()),
        )
    except Exception as exc:
        raise LoadError(
            f"the model's embedded chat template does not parse ({exc}); "
            "set option chat_format:<name> to use a built-in format instead"
        ) from None


def _json_field(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"{field} must be JSON: {exc}") from None


def message_dicts(messages: list[pb.Message]) -> list[dict[str, Any]]:
    """Proto Messages -> the OpenAI-shaped dicts chat templates expect."""
    result: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        for field in ("name", "tool_call_id", "reasoning_content"):
            if getattr(message, field):
                item[field] = getattr(message, field)
        if message.tool_calls:
            item["tool_calls"] = _json_field(message.tool_calls, "Message.tool_calls")
        result.append(item)
    return result


def knows_tools(formatter: ChatFormatter) -> bool:
    """A Jinja template that renders tools and tool turns itself; built-in formats drop them."""
    template = getattr(formatter, "template", None)
    return isinstance(template, str) and "tool" in template


def tools_preamble(functions: list[dict[str, Any]], mode: ToolMode) -> str:
    """The tools and the call format, told in words to a model whose template has no place for them."""
    lines = ["You can call these functions:"]
    for function in functions:
        parameters = json.dumps(function.get("parameters") or {}, ensure_ascii=False, separators=(",", ":"))
        description = f" {function['description']}" if function.get("description") else ""
        lines.append(f"- {function['name']}:{description} Arguments (JSON Schema): {parameters}")
    lines.append(
        'To call a function, answer with only a JSON object: {"name": <function name>, '
        '"arguments": <its arguments>}.'
    )
    if mode.forced:
        lines.append(f"Call {mode.forced} now.")
    elif mode.choice == "required":
        lines.append("Call a function now.")
    return "\n".join(lines) + "\n\n"


def tools_in_text(
    messages: list[dict[str, Any]], functions: list[dict[str, Any]], mode: ToolMode | None
) -> list[dict[str, Any]]:
    """Messages for a template without tools: past calls written as the model writes them, tool results as
    user turns naming the function, and (when tools are offered) the tools told in the first user turn."""
    names = {
        call.get("id"): (call.get("function") or {}).get("name")
        for m in messages
        for call in m.get("tool_calls") or []
        if isinstance(call, dict)
    }
    out: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            name = message.get("name") or names.get(message.get("tool_call_id")) or "the function"
            out.append({"role": "user", "content": f"Result of {name}: {message['content']}"})
        elif message.get("tool_calls"):
            written = calls_text(message["tool_calls"])
            content = f"{message['content']}\n{written}" if message["content"] else written
            out.append({"role": message["role"], "content": content})
        else:
            out.append(message)
    if mode is not None and functions:
        first = next((i for i, m in enumerate(out) if m["role"] == "user"), None)
        preamble = tools_preamble(functions, mode)
        if first is None:
            out.insert(0, {"role": "user", "content": preamble.strip()})
        else:
            out[first] = {**out[first], "content": preamble + out[first]["content"]}
    return out


def render_chat(formatter: ChatFormatter, req: pb.PredictOptions, mode: ToolMode | None = None) -> ChatPrompt:
    """The prompt of a chat request; `mode`: how it may call tools (None: it may not)."""
    tools = _json_field(req.Tools, "PredictOptions.Tools") if req.Tools else None
    messages = message_dicts(list(req.Messages))
    if not knows_tools(formatter) and (
        tools or any(m["role"] == "tool" or "tool_calls" in m for m in messages)
    ):
        messages, tools = tools_in_text(messages, tool_functions(tools or []), mode), None
    try:
        rendered = formatter(messages=messages, tools=tools)  # type: ignore[arg-type]
    except InvalidRequestError:
        raise
    except Exception as exc:
        raise InvalidRequestError(f"the chat template rejected these messages: {exc}") from None
    stop = rendered.stop if isinstance(rendered.stop, list) else [rendered.stop] if rendered.stop else []
    return ChatPrompt(text=rendered.prompt, add_bos=not rendered.added_special, stop=tuple(stop))
