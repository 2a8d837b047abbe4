"""The simulator's deterministic tool-call mode.

When a request offers tools (`PredictOptions.Tools`) and its last message is the user's and says
`call <tool>(<JSON object>)` (or `call <tool>` for no arguments) naming an offered tool, the answer is
that tool call (several `call …` phrases: several calls, in order). When the last messages are tool
results, the answer is text quoting them: `Tool <name> returned: <content>` per result. Anything else
is answered as usual (simulated words). The same request always gives the same calls and ids.
"""

from __future__ import annotations

import hashlib
import json
import re

from corral.proto import backend_pb2 as pb

_CALL = re.compile(r"\bcall\s+([A-Za-z0-9_.-]+)")
_DECODER = json.JSONDecoder()


def offered_tools(tools_json: str) -> set[str]:
    """Names of the functions in PredictOptions.Tools (OpenAI `tools` JSON); unreadable JSON offers none."""
    try:
        tools = json.loads(tools_json)
    except json.JSONDecodeError:
        return set()
    names = set()
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _arguments(text: str, start: int) -> str:
    """The JSON object right after `call name(`, re-encoded; `{}` when there is none or it does not parse."""
    rest = text[start:].lstrip()
    if not rest.startswith("("):
        return "{}"
    try:
        value, _end = _DECODER.raw_decode(rest[1:].lstrip())
    except json.JSONDecodeError:
        return "{}"
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else "{}"


def requested_calls(req: pb.PredictOptions) -> list[pb.ToolCallDelta]:
    """The tool calls the last user message asks for, among the offered tools (empty: no tool mode)."""
    if not req.Tools or not req.Messages or req.Messages[-1].role != "user" or req.ToolChoice == "none":
        return []
    offered = offered_tools(req.Tools)
    text = req.Messages[-1].content
    calls: list[pb.ToolCallDelta] = []
    for match in _CALL.finditer(text):
        name = match.group(1)
        if name not in offered:
            continue
        arguments = _arguments(text, match.end())
        digest = hashlib.sha256(f"{len(calls)}\0{name}\0{arguments}\0{text}".encode()).hexdigest()[:24]
        calls.append(pb.ToolCallDelta(index=len(calls), id=f"call_{digest}", name=name, arguments=arguments))
    return calls


def tool_results_answer(req: pb.PredictOptions) -> str | None:
    """Text quoting the tool results that end the conversation, or None when it does not end with any."""
    results = []
    for message in reversed(req.Messages):
        if message.role != "tool":
            break
        results.append(f"Tool {message.name or message.tool_call_id or 'tool'} returned: {message.content}")
    return "\n".join(reversed(results)) if results else None
