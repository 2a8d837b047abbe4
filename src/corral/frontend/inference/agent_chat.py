"""Chat completions of models with `mcp:` servers, and `GET /v1/mcp/servers/{model}`.

The agent loop (corral.agents.loop) runs here on the frontend: the model is called on its replicas as
usual, with the MCP tools offered; every tool call it proposes is executed on an agent worker through
`mcp.tools.execute` (NATS request-reply to the `agent-workers` queue group) and its result goes back
to the model, for at most --mcp-max-iterations turns. A streamed client sees each tool call (a standard
`delta.tool_calls` chunk) and each result (`delta.tool_result`, an additive field) before the answer.

A request's `tool_choice` holds for the loop's first model turn (`required`, or a named MCP tool, makes the
model call one under the tool-call grammar; later turns are `auto`; `none` offers no tools).

Only models with `mcp:` servers, asked without client-side `tools`, come here: the plain chat path is
untouched. A request that brings its own `tools` gets the model's tool calls back to run itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import APIRouter
from fastapi.responses import Response, StreamingResponse

from corral.agents.client import AgentBus, AgentTimeout, NoAgentWorker
from corral.agents.loop import LoopResult, ToolCall, Turn, run_loop
from corral.bus.agent_messages import MCPToolDef
from corral.frontend.errors import APIError
from corral.frontend.inference.chat_wire import DEFAULT_MAX_TOKENS, predict_options
from corral.frontend.inference.choices import usage as _usage
from corral.frontend.inference.openai import _json, _unary, config_for
from corral.frontend.inference.schemas import ChatCompletionRequest
from corral.frontend.inference.sse import DONE, sse
from corral.frontend.inference.tool_calls import proto_message, reply_tool_calls
from corral.frontend.state import AgentChats, FrontendState
from corral.models.config import ModelConfig
from corral.models.names import name_problem
from corral.routing.router import Router

log = logging.getLogger(__name__)

DISCOVERY_TTL_S = 30.0


def _unavailable(exc: Exception) -> APIError:
    if isinstance(exc, NoAgentWorker):
        return APIError(503, str(exc), "server_error", "no_agent_worker", headers={"Retry-After": "5"})
    return APIError(504, str(exc), "server_error", "agent_worker_timeout")


@dataclass
class _Run:
    """One agent-loop completion: the calls made (and where), for the response's `mcp` field."""

    calls: list[dict[str, Any]] = field(default_factory=list)


class AgentChat:
    def __init__(self, router: Router, bus: AgentBus, max_iterations: int) -> None:
        self.router, self.bus, self.max_iterations = router, bus, max_iterations
        self._tools: dict[tuple[str, str], tuple[float, list[MCPToolDef]]] = {}

    async def tools(self, cfg: ModelConfig) -> list[MCPToolDef]:
        """The model's MCP tools from an agent worker (kept for a short while: every request needs them)."""
        key = (cfg.name, cfg.revision)
        cached = self._tools.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            answer = await self.bus.discover(cfg.name, cfg.mcp)
        except (NoAgentWorker, AgentTimeout) as exc:
            raise _unavailable(exc) from None
        if answer.error:
            raise APIError(
                502,
                f"MCP discovery of model {cfg.name} failed on agent worker {answer.node_id}: {answer.error}",
                "server_error",
                "mcp_discovery_failed",
            )
        defs = list(answer.tools or [])
        now = time.monotonic()
        self._tools = {k: v for k, v in self._tools.items() if v[0] > now}  # edited configs leave no entries
        self._tools[key] = (now + DISCOVERY_TTL_S, defs)
        return defs

    async def chat(self, cfg: ModelConfig, body: ChatCompletionRequest) -> Response:
        defs = await self.tools(cfg)  # before any byte: no agent worker is a plain 503
        tools_json = orjson.dumps([{"type": "function", "function": d.function} for d in defs]).decode()
        known = {d.tool_name for d in defs}
        max_tokens = body.max_output_tokens() or DEFAULT_MAX_TOKENS
        run = _Run()
        first_choice = _first_choice(body)
        turns = 0

        async def model(history: list[dict[str, Any]], tools_allowed: bool) -> Turn:
            nonlocal turns
            opts = predict_options(cfg, body, max_tokens)
            opts.UseTokenizerTemplate = True
            opts.Messages.extend(proto_message(m) for m in history)
            if tools_allowed and defs and first_choice != "none":
                opts.Tools, opts.ToolChoice = tools_json, first_choice if turns == 0 else "auto"
            turns += 1
            reply, _replica = await _unary(self.router, cfg, "Predict", opts, "messages")
            calls = reply_tool_calls(reply) if reply.chat_deltas else []
            return Turn(
                content=reply.message.decode(errors="replace"),
                tool_calls=calls,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.tokens,
                finish_reason="length" if reply.tokens >= max_tokens else "stop",
            )

        async def run_tool(call: ToolCall) -> str:
            return await self._run_tool(cfg, call, known, run)

        messages = [
            m.model_dump(exclude_none=True, include={"role", "content", "name", "tool_calls", "tool_call_id"})
            | {"content": m.text()}
            for m in body.messages
        ]
        iterations = cfg.mcp.max_iterations or self.max_iterations
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if body.stream:
            return self._stream(cfg, messages, model, run_tool, iterations, ident, created, body)
        outcome = await run_loop(messages, model, run_tool, iterations)
        return _json(self._completion(cfg, outcome, run, ident, created))

    async def _run_tool(self, cfg: ModelConfig, call: ToolCall, known: set[str], run: _Run) -> str:
        """The tool's result text; every failure (unknown tool, bad arguments, deadline, tool error) comes back
        to the model as error text, except having no agent worker at all."""
        record: dict[str, Any] = {"id": call.id, "name": call.name, "arguments": call.arguments}
        run.calls.append(record)
        if call.name not in known:
            record["error"] = (
                f"unknown tool {call.name!r}; this model's MCP tools: {', '.join(sorted(known))}"
            )
            return f"error: {record['error']}"
        try:
            arguments = call.parsed_arguments()
            answer = await self.bus.execute(cfg.name, cfg.mcp, call.name, arguments)
        except ValueError as exc:
            record["error"] = str(exc)
            return f"error: {exc}"
        except AgentTimeout as exc:
            record["error"] = str(exc)
            return f"error: {exc}"
        except NoAgentWorker as exc:
            raise _unavailable(exc) from None
        record["node_id"] = answer.node_id or ""
        if answer.error is not None:
            record["error"] = answer.error
            log.info("MCP tool %s of %s failed on %s: %s", call.name, cfg.name, answer.node_id, answer.error)
            return f"error: {answer.error}"
        record["result"] = answer.result or ""
        return answer.result or ""

    def _completion(
        self, cfg: ModelConfig, outcome: LoopResult, run: _Run, ident: str, created: int
    ) -> dict[str, Any]:
        return {
            "id": ident,
            "object": "chat.completion",
            "created": created,
            "model": cfg.name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": outcome.final.content},
                    "logprobs": None,
                    "finish_reason": outcome.final.finish_reason,
                }
            ],
            "usage": _usage(outcome.prompt_tokens, outcome.completion_tokens),
            "mcp": {"iterations": outcome.iterations, "tool_calls": run.calls},
        }

    def _stream(
        self,
        cfg: ModelConfig,
        messages: list[dict[str, Any]],
        model: Any,
        run_tool: Any,
        iterations: int,
        ident: str,
        created: int,
        body: ChatCompletionRequest,
    ) -> StreamingResponse:
        head = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": cfg.name}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse(
                {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            )

        async def events() -> AsyncIterator[bytes]:
            queue: asyncio.Queue[bytes | None] = asyncio.Queue()
            count = {"calls": 0}

            async def on_event(kind: str, payload: dict[str, Any]) -> None:
                if kind == "tool_call":
                    queue.put_nowait(chunk({"tool_calls": [{"index": count["calls"], **payload}]}))
                    count["calls"] += 1
                else:
                    queue.put_nowait(chunk({"tool_result": payload}))

            async def drive() -> LoopResult:
                try:
                    return await run_loop(messages, model, run_tool, iterations, on_event)
                finally:
                    queue.put_nowait(None)

            yield chunk({"role": "assistant", "content": ""})
            task = asyncio.create_task(drive())
            try:
                while (item := await queue.get()) is not None:
                    yield item
                outcome = await task
            except APIError as exc:
                yield sse({"error": {"message": exc.message, "type": exc.type, "code": exc.code}})
                yield DONE
                return
            except Exception as exc:
                yield sse(
                    {
                        "error": {
                            "message": str(exc) or type(exc).__name__,
                            "type": "server_error",
                            "code": "agent_loop_error",
                        }
                    }
                )
                yield DONE
                return
            finally:
                task.cancel()
            if outcome.final.content:
                yield chunk({"content": outcome.final.content})
            yield chunk({}, outcome.final.finish_reason)
            if body.stream_options and body.stream_options.include_usage:
                yield sse(
                    {**head, "choices": [], "usage": _usage(outcome.prompt_tokens, outcome.completion_tokens)}
                )
            yield DONE

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


def _first_choice(body: ChatCompletionRequest) -> str:
    """The request's `tool_choice` for the loop's first model turn (later turns: auto, else a required call would
    repeat until the iterations run out); `none` offers no tools at all."""
    choice = body.tool_choice
    if choice is None:
        return "auto"
    return choice if isinstance(choice, str) else orjson.dumps(choice).decode()


def build_mcp_router(state: FrontendState, agents: AgentChats) -> APIRouter:
    router = APIRouter(prefix="/v1/mcp")

    @router.get("/servers/{model:path}")
    async def servers(model: str) -> Response:
        problem = name_problem(model)
        if problem is not None:
            raise APIError(400, f"model name {problem}", "invalid_request_error", "invalid_value", "model")
        cfg = config_for(state, model)
        if not cfg.mcp:
            return _json({"model": cfg.name, "servers": []})
        try:
            answer = await agents.bus.discover(cfg.name, cfg.mcp)
        except (NoAgentWorker, AgentTimeout) as exc:
            raise _unavailable(exc) from None
        if answer.error:
            raise APIError(
                502,
                f"MCP discovery failed on agent worker {answer.node_id}: {answer.error}",
                "server_error",
                "mcp_discovery_failed",
            )
        return _json(
            {
                "model": cfg.name,
                "node_id": answer.node_id,
                "servers": [s.model_dump(exclude_none=True) for s in answer.servers or []],
                "tools": [t.model_dump() for t in answer.tools or []],
            }
        )

    return router
