"""The Responses API's objects: a response with its output items (`Draft`), and the server-sent events of a
streamed one (`EventWriter`), in OpenAI's shapes and order:

    response.created, response.in_progress,
    per text item:  response.output_item.added, response.content_part.added, response.output_text.delta…,
                    response.output_text.done, response.content_part.done, response.output_item.done
    per call item:  response.output_item.added, response.function_call_arguments.delta…,
                    response.function_call_arguments.done, response.output_item.done
    response.completed (or response.incomplete when the token budget ran out)

each with a rising `sequence_number`. The output is the assistant's text (one message item, opened by its first
piece) and then its tool calls (one `function_call` item each, opened by its first delta, which closes the text).
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from corral.frontend.errors import APIError
from corral.frontend.inference.responses_request import Message, ResponsesRequest
from corral.proto import backend_pb2

Item = dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(16).hex()}"


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str, status: str) -> Item:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [_text_part(text)],
    }


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> Item:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def input_items(value: str | list[Any]) -> list[Item]:
    """A request's `input` as `GET /v1/responses/{id}/input_items` lists it: each item with its type and an id
    (the client's, else a new one), a message's text as content parts. For input `input_messages` accepted."""
    if isinstance(value, str):
        value = [{"role": "user", "content": value}] if value else []
    out: list[Item] = []
    for item in value:
        kind = item.get("type", "message")
        if kind == "message":
            content, role = item.get("content"), item["role"]
            if isinstance(content, str):
                content = [
                    _text_part(content) if role == "assistant" else {"type": "input_text", "text": content}
                ]
            out.append(
                {
                    "id": item.get("id") or new_id("msg"),
                    "type": "message",
                    "role": role,
                    "status": "completed",
                    "content": content,
                }
            )
        elif kind == "function_call":
            out.append(
                call_item(
                    item.get("id") or new_id("fc"),
                    item["call_id"],
                    item["name"],
                    item.get("arguments", ""),
                    "completed",
                )
            )
        else:  # function_call_output
            out.append(
                {
                    "id": item.get("id") or new_id("fco"),
                    "type": "function_call_output",
                    "status": "completed",
                    "call_id": item["call_id"],
                    "output": item.get("output"),
                }
            )
    return out


def items_page(items: list[dict[str, Any]], order: str, limit: int, after: str | None) -> dict[str, Any]:
    """One page of input items, OpenAI's list shape: newest first unless `order` is asc, after item `after`."""
    if order == "desc":
        items.reverse()
    if after is not None:
        at = next((i for i, item in enumerate(items) if item.get("id") == after), None)
        if at is None:
            raise APIError(
                400,
                f"invalid request: field 'after': no input item {after!r} in this response; send "
                "the last_id of the page before",
                "invalid_request_error",
                "invalid_value",
                "after",
            )
        items = items[at + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


class Draft:
    """One response as it is built: the request's settings echoed, its output items, its outcome."""

    def __init__(self, body: ResponsesRequest, model: str, created_at: int, tools: list[Any] | None) -> None:
        self.id, self.body, self.model, self.created_at, self.tools = (
            new_id("resp"),
            body,
            model,
            created_at,
            tools,
        )
        self.output: list[Item] = []
        self.status, self.incomplete = "in_progress", False
        self.usage: dict[str, Any] | None = None

    def finish(self, input_tokens: int, output_tokens: int, *, out_of_tokens: bool) -> None:
        """The outcome: completed, or incomplete (`max_output_tokens`) when the budget ran out mid-text."""
        self.incomplete = out_of_tokens and not any(item["type"] == "function_call" for item in self.output)
        self.status = "incomplete" if self.incomplete else "completed"
        for item in self.output:
            item["status"] = self.status
        self.usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }

    def obj(self) -> dict[str, Any]:
        body = self.body
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if self.incomplete else None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "max_tool_calls": None,
            "model": self.model,
            "output": self.output,
            "parallel_tool_calls": True,
            "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": body.store,
            "temperature": body.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": body.tool_choice or "auto",
            "tools": self.tools or [],
            "top_p": body.top_p,
            "truncation": "disabled",
            "usage": self.usage,
            "user": None,
            "metadata": body.metadata or {},
        }

    def messages(self) -> list[Message]:
        """The output as chat messages (one assistant turn), for the conversation a follow-up continues."""
        text = "".join(
            p["text"] for item in self.output if item["type"] == "message" for p in item["content"]
        )
        calls = [
            {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            for item in self.output
            if item["type"] == "function_call"
        ]
        message: Message = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return [message]


def unary_output(draft: Draft, text: str, calls: list[tuple[str, str, str]]) -> None:
    """A whole answer's items: its text (also when empty and there is no call), then each (id, name, arguments)."""
    if text or not calls:
        draft.output.append(message_item(new_id("msg"), text, "completed"))
    for call_id, name, arguments in calls:
        draft.output.append(call_item(new_id("fc"), call_id, name, arguments, "completed"))


class EventWriter:
    """The events of one streamed response, each encoded as it is made."""

    def __init__(self, draft: Draft) -> None:
        self.draft = draft
        self.sequence = 0
        self._text: Item | None = None  # the open message item
        self._calls: dict[int, Item] = {}  # backend tool-call index → its open function_call item

    def event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    def start(self) -> list[bytes]:
        obj = self.draft.obj()
        return [
            self.event("response.created", response=obj),
            self.event("response.in_progress", response=obj),
        ]

    def _added(self, item: Item) -> bytes:
        self.draft.output.append(item)
        return self.event(
            "response.output_item.added",
            output_index=len(self.draft.output) - 1,
            item={**item, "content": []} if item["type"] == "message" else item,
        )

    def text(self, piece: str) -> list[bytes]:
        events = []
        item = self._text
        if item is None:
            item = self._text = message_item(new_id("msg"), "", "in_progress")
            events.append(self._added(item))
            events.append(
                self.event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=len(self.draft.output) - 1,
                    content_index=0,
                    part=_text_part(""),
                )
            )
        if not piece:
            return events
        item["content"][0]["text"] += piece
        events.append(
            self.event(
                "response.output_text.delta",
                item_id=item["id"],
                output_index=self._index(item),
                content_index=0,
                delta=piece,
                logprobs=[],
            )
        )
        return events

    def reply(self, reply: backend_pb2.Reply, tools: bool) -> list[bytes]:
        """The events of one backend reply: its text, and with `tools` offered its tool-call pieces."""
        events = self.text(reply.message.decode(errors="replace")) if reply.message else []
        for delta in reply.chat_deltas if tools else ():
            for call in delta.tool_calls:
                events += self.call(call.index, call.id, call.name, call.arguments)
        return events

    def call(self, index: int, call_id: str, name: str, arguments: str) -> list[bytes]:
        """A piece of tool call `index` (its first piece opens the item and closes any text before it)."""
        events = self._close_text()
        item = self._calls.get(index)
        if item is None:
            item = self._calls[index] = call_item(
                new_id("fc"), call_id or new_id("call"), name, "", "in_progress"
            )
            events.append(self._added(item))
        if arguments:
            item["arguments"] += arguments
            events.append(
                self.event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=self._index(item),
                    delta=arguments,
                )
            )
        return events

    def close_items(self) -> list[bytes]:
        """Close every open item (an answer with no item at all gets an empty message, as a unary one)."""
        events = self.text("") if not self.draft.output else []
        events += self._close_text()
        for item in self._calls.values():
            item["status"] = "completed"
            events.append(
                self.event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=self._index(item),
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
            events.append(self.event("response.output_item.done", output_index=self._index(item), item=item))
        self._calls = {}
        return events

    def end(self) -> bytes:
        """The last event, after `Draft.finish`: the whole response."""
        kind = "response.incomplete" if self.draft.incomplete else "response.completed"
        return self.event(kind, response=self.draft.obj())

    def failed(self, code: str, message: str) -> list[bytes]:
        """An `error` event with corral's code, then `response.failed` (whose error codes are OpenAI's own)."""
        self.draft.status = "failed"
        obj = {**self.draft.obj(), "error": {"code": "server_error", "message": message}}
        return [
            self.event("error", code=code, message=message, param=None),
            self.event("response.failed", response=obj),
        ]

    def _close_text(self) -> list[bytes]:
        item, self._text = self._text, None
        if item is None:
            return []
        item["status"] = "completed"
        index, part = self._index(item), item["content"][0]
        return [
            self.event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=part["text"],
                logprobs=[],
            ),
            self.event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=part,
            ),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

    def _index(self, item: Item) -> int:
        return next(i for i, other in enumerate(self.draft.output) if other is item)
