"""Agent jobs on an agent worker: `jobs.mcp-ci.new` and `agent.execute`.

A job runs the agent loop here: the model is called through the frontend's `/v1/chat/completions` with
the key provisioned for this node, with the MCP tools passed as `tools` (so the frontend serves a plain
tool-calling completion and does not run a loop of its own); the tools run on this worker. Progress and
the result go out on the job's subjects — `jobs.<id>.progress|result` for MCP CI jobs,
`agent.<id>.events.<user>` for agent chats — and `jobs.<id>.cancel` / `agent.<id>.cancel` stop it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.agents.loop import ToolCall, Turn, run_loop
from corral.agents.tools import ToolService, all_servers
from corral.bus import subjects
from corral.bus.agent_messages import AgentJob, JobProgress, JobResult, MCPToolRequest
from corral.bus.messages import Message, ValidationError

log = logging.getLogger(__name__)

DEFAULT_ITERATIONS = 10
MAX_ITERATIONS = 100
JOB_TIMEOUT_KNOB = "--mcp-ci-job-timeout / LOCALAI_MCP_CI_JOB_TIMEOUT"


def parse_turn(body: dict[str, Any]) -> Turn:
    """An OpenAI chat completion → Turn."""
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = [
        ToolCall(
            id=str(c.get("id") or f"call_{i}"),
            name=str((c.get("function") or {}).get("name") or ""),
            arguments=str((c.get("function") or {}).get("arguments") or "{}"),
        )
        for i, c in enumerate(message.get("tool_calls") or [])
    ]
    usage = body.get("usage") or {}
    return Turn(
        content=str(message.get("content") or ""),
        tool_calls=calls,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        finish_reason=str(choice.get("finish_reason") or "stop"),
    )


class JobRunner:
    def __init__(
        self,
        nc: Client,
        tools: ToolService,
        api_url: str,
        api_token: str,
        node_id: str,
        job_timeout_s: float,
        tool_timeout_s: float,
    ) -> None:
        self.nc, self.tools, self.node_id = nc, tools, node_id
        self.api_token = api_token
        self.job_timeout_s, self.tool_timeout_s = job_timeout_s, tool_timeout_s
        self._http = httpx.AsyncClient(base_url=api_url, timeout=httpx.Timeout(job_timeout_s, connect=10.0))
        self._running: dict[str, asyncio.Task[str]] = {}
        self._cancelled: set[str] = set()
        self._traced: dict[str, int] = {}  # job id → trace entries published so far

    async def close(self) -> None:
        for task in self._running.values():
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        await self._http.aclose()

    async def on_mcp_ci_job(self, msg: Msg) -> None:
        await self._run(msg, agent=False)

    async def on_agent_execute(self, msg: Msg) -> None:
        await self._run(msg, agent=True)

    async def on_cancel(self, msg: Msg) -> None:
        job_id = msg.subject.split(".")[1]
        task = self._running.get(job_id)
        if task is not None:
            log.info("job %s cancelled", job_id)
            self._cancelled.add(job_id)
            task.cancel()

    def _subjects(self, job: AgentJob, agent: bool) -> tuple[str, str]:
        if agent:
            events = subjects.agent_events(job.job_id, "corral")
            return events, events
        return subjects.job_progress(job.job_id), subjects.job_result(job.job_id)

    async def _publish(self, subject: str, message: Message) -> None:
        await self.nc.publish(subject, message.to_json())

    async def _finish(self, subject: str, job: AgentJob, status: str, **fields: str) -> None:
        """The job's result, with the number of trace entries it published (a recorder that gets the result
        before the last entry still takes that entry)."""
        count = self._traced.pop(job.job_id, 0)
        await self._publish(
            subject,
            JobResult(job_id=job.job_id, status=status, node_id=self.node_id, trace_count=count, **fields),
        )

    async def _run(self, msg: Msg, *, agent: bool) -> None:
        try:
            job = AgentJob.from_json(msg.data)
        except ValidationError as exc:
            log.warning("ignoring a malformed job on %s: %s", msg.subject, exc)
            return
        if not job.job_id or subjects.token(job.job_id) != job.job_id:
            log.warning("ignoring a job without a usable job_id on %s", msg.subject)
            return
        progress, result = self._subjects(job, agent)
        if msg.reply:  # the frontend asked with request-reply: tell it which worker took the job
            await msg.respond(
                JobProgress(job_id=job.job_id, status="accepted", node_id=self.node_id).to_json()
            )
        await self._publish(
            progress,
            JobProgress(
                job_id=job.job_id,
                status="running",
                node_id=self.node_id,
                message="job started on agent worker",
            ),
        )
        task = asyncio.create_task(self._loop(job, progress))
        self._running[job.job_id] = task
        try:
            text = await asyncio.wait_for(task, self.job_timeout_s)
        except asyncio.CancelledError:
            if job.job_id in self._cancelled:  # jobs.<id>.cancel / agent.<id>.cancel
                self._cancelled.discard(job.job_id)
                await self._finish(result, job, "cancelled", error="cancelled on request")
                return
            await self._finish(result, job, "cancelled", error="agent worker shutting down")
            raise
        except TimeoutError:
            await self._finish(
                result, job, "failed", error=f"job ran past {self.job_timeout_s:g}s; raise {JOB_TIMEOUT_KNOB}"
            )
            return
        except Exception as exc:
            await self._finish(result, job, "failed", error=str(exc) or type(exc).__name__)
            return
        finally:
            self._running.pop(job.job_id, None)
        await self._finish(result, job, "completed", result=text)

    async def _loop(self, job: AgentJob, progress: str) -> str:
        servers = await self.tools.servers(job.model)  # the frontend's config, not the job payload's
        if not servers:
            raise ValueError("no MCP servers configured for this model")
        _infos, defs = await self.tools.describe(all_servers(servers))
        tools = [{"type": "function", "function": d.function} for d in defs]
        messages = list(job.messages or [{"role": "user", "content": job.prompt}])

        async def model(history: list[dict[str, Any]], tools_allowed: bool) -> Turn:
            body: dict[str, Any] = {"model": job.model, "messages": history}
            if tools_allowed and tools:
                body["tools"] = tools
            headers = {"Authorization": f"Bearer {self.api_token}"} if self.api_token else {}
            response = await self._http.post("/v1/chat/completions", json=body, headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"model call failed (HTTP {response.status_code}): {response.text[:300]}")
            return parse_turn(response.json())

        async def run_tool(call: ToolCall) -> str:
            try:
                arguments = call.parsed_arguments()
            except ValueError as exc:
                return f"error: {exc}"
            req = MCPToolRequest(
                model_name=job.model, tool_name=call.name, arguments=arguments, timeout_s=self.tool_timeout_s
            )
            answer = await self.tools.execute(req, self.tool_timeout_s)
            return answer.result or "" if answer.error is None else f"error: {answer.error}"

        async def event(kind: str, payload: dict[str, Any]) -> None:
            content = (
                f"{payload['function']['name']}({payload['function']['arguments']})"
                if kind == "tool_call"
                else f"{payload['name']}: {payload['content']}"
            )
            seq = self._traced[job.job_id] = self._traced.get(job.job_id, 0) + 1
            await self._publish(
                progress,
                JobProgress(
                    job_id=job.job_id,
                    trace_type=kind,
                    trace_content=content,
                    node_id=self.node_id,
                    trace_seq=seq,
                ),
            )

        iterations = min(job.max_iterations or DEFAULT_ITERATIONS, MAX_ITERATIONS)
        outcome = await run_loop(messages, model, run_tool, iterations, event)
        return outcome.final.content
