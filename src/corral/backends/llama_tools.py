"""Tool calls on the llama.cpp backend: the grammar a request's tools and choice allow, and the replies
that carry what the model wrote (text pieces and tool-call deltas, corral.grammar.tool_calls).

`PredictOptions.Tools` (OpenAI `tools` JSON), `ToolChoice` (`none`, `auto`, `required` or the named-function
JSON; empty means auto) and `Metadata["parallel_tool_calls"]` (`true`: an array of calls may come; else
exactly one call, which keeps a small model from repeating calls until max_tokens) decide it.
"""

from __future__ import annotations

from corral.backends.engine import InvalidRequestError, piece_reply
from corral.grammar.json_schema import SchemaError
from corral.grammar.tool_calls import CallDelta, ToolMode, cached_call_grammar, tool_mode
from corral.proto import backend_pb2 as pb


def requested_tools(req: pb.PredictOptions) -> tuple[ToolMode | None, str]:
    """How the request may call tools and the grammar of it; (None, '') without tools or with choice none."""
    if not req.Tools or not req.Messages:
        return None, ""
    parallel = req.Metadata.get("parallel_tool_calls") == "true"
    try:
        mode = tool_mode(req.ToolChoice, parallel)
        if mode is None:
            return None, ""
        grammar = cached_call_grammar(req.Tools, req.ToolChoice, parallel)
        if not grammar:  # no function among the tools: nothing to call
            return None, ""
    except SchemaError as exc:
        raise InvalidRequestError(f"{exc.dotted('PredictOptions.Tools')}: {exc.message}") from None
    except (ValueError, TypeError, KeyError) as exc:  # JSON errors are ValueErrors
        raise InvalidRequestError(f"PredictOptions.Tools / ToolChoice: {exc}") from None
    if req.Grammar:
        raise InvalidRequestError(
            "PredictOptions.Grammar cannot be combined with Tools and a ToolChoice other "
            "than none: the tool calls have their own grammar"
        )
    return mode, grammar


def call_replies(events: list[str | CallDelta]) -> list[pb.Reply]:
    """One Reply per text piece, and one per run of tool-call deltas."""
    replies: list[pb.Reply] = []
    run: list[pb.ToolCallDelta] = []
    for event in events:
        if isinstance(event, CallDelta):
            run.append(
                pb.ToolCallDelta(index=event.index, id=event.id, name=event.name, arguments=event.arguments)
            )
            continue
        if run:
            replies.append(pb.Reply(chat_deltas=[pb.ChatDelta(tool_calls=run)]))
            run = []
        replies.append(piece_reply(event))
    if run:
        replies.append(pb.Reply(chat_deltas=[pb.ChatDelta(tool_calls=run)]))
    return replies
