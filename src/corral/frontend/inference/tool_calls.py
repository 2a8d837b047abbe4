"""Tool calls between OpenAI bodies and the backend protocol: messages carrying calls or results, the
`Tools` of PredictOptions, and the calls a backend returns in `Reply.chat_deltas`."""

from __future__ import annotations

from typing import Any

import orjson

from corral.agents.loop import ToolCall
from corral.proto import backend_pb2


def proto_message(message: dict[str, Any]) -> backend_pb2.Message:
    """An OpenAI-shaped message dict (the agent loop's history) → backend Message."""
    out = backend_pb2.Message(
        role=str(message.get("role") or ""),
        content=str(message.get("content") or ""),
        name=str(message.get("name") or ""),
    )
    if message.get("tool_call_id"):
        out.tool_call_id = str(message["tool_call_id"])
    if message.get("tool_calls"):
        out.tool_calls = orjson.dumps(message["tool_calls"]).decode()
    return out


def reply_tool_calls(reply: backend_pb2.Reply) -> list[ToolCall]:
    """The tool calls in a reply's chat deltas, merged by index (streamed arguments arrive in pieces)."""
    merged: dict[int, dict[str, str]] = {}
    for delta in reply.chat_deltas:
        for call in delta.tool_calls:
            slot = merged.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = slot["id"] or call.id
            slot["name"] = slot["name"] or call.name
            slot["arguments"] += call.arguments
    return [
        ToolCall(id=s["id"] or f"call_{i}", name=s["name"], arguments=s["arguments"] or "{}")
        for i, s in sorted(merged.items())
    ]


def delta_tool_calls(reply: backend_pb2.Reply) -> list[dict[str, Any]]:
    """A streamed reply's tool-call pieces as OpenAI `delta.tool_calls` entries: a call's first piece (it has
    the id) carries its id, type and name; the others only their index and argument text."""
    out: list[dict[str, Any]] = []
    for delta in reply.chat_deltas:
        for call in delta.tool_calls:
            if call.id:
                out.append(
                    {
                        "index": call.index,
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                )
            else:
                out.append({"index": call.index, "function": {"arguments": call.arguments}})
    return out


def openai_tool_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [c.openai() for c in calls]
