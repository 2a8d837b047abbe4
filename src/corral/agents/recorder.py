"""The frontend's record of agent jobs: it publishes new jobs to the agent workers and keeps their progress
and outcome (from `jobs.*.progress|result` and `agent.*.events.*`) in PostgreSQL (`agent_jobs`)."""

from __future__ import annotations

import logging
import uuid

import asyncpg
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from corral.agents.client import START_AGENT_WORKER, NoAgentWorker
from corral.bus import subjects
from corral.bus.agent_messages import AgentJob, JobProgress, JobResult
from corral.bus.messages import ValidationError
from corral.models.config import ModelConfig
from corral.store import agent_jobs

log = logging.getLogger(__name__)

ACCEPT_TIMEOUT_S = 5.0  # an agent worker acknowledges a job at once, before running it
AGENT_SUBJECT_BY_KIND = {"mcp-ci": subjects.MCP_CI_JOBS_NEW, "agent": subjects.AGENT_EXECUTE}


class JobRecorder:
    def __init__(self, pool: asyncpg.Pool, nc: Client) -> None:
        self.pool, self.nc = pool, nc
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        for subject in ("jobs.*.progress", "jobs.*.result", "agent.*.events.*"):
            self._subs.append(await self.nc.subscribe(subject, cb=self._on_event))

    async def stop(self) -> None:
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # a closed connection has nothing left to drop
                log.debug("unsubscribe failed: %s", exc)

    async def submit(self, kind: str, cfg: ModelConfig, prompt: str, max_iterations: int) -> str:
        job_id = str(uuid.uuid4())
        await agent_jobs.insert(self.pool, job_id, kind, cfg.name, prompt)
        job = AgentJob(
            job_id=job_id,
            model=cfg.name,
            model_name=cfg.name,
            prompt=prompt,
            max_iterations=cfg.mcp.max_iterations or max_iterations,
            **cfg.mcp.wire(),
        )
        try:  # request-reply, so that no agent worker at all is an error now, not a job queued forever
            await self.nc.request(AGENT_SUBJECT_BY_KIND[kind], job.to_json(), timeout=ACCEPT_TIMEOUT_S)
        except NoRespondersError:
            await agent_jobs.finish(self.pool, job_id, "failed", "", "", "no agent worker was connected")
            raise NoAgentWorker(
                f"no agent worker is connected to run agent jobs; {START_AGENT_WORKER}"
            ) from None
        except NatsTimeout:
            log.warning(
                "no agent worker acknowledged job %s within %gs; it stays queued", job_id, ACCEPT_TIMEOUT_S
            )
        return job_id

    async def cancel(self, kind: str, job_id: str) -> None:
        subject = subjects.agent_cancel(job_id) if kind == "agent" else subjects.job_cancel(job_id)
        await self.nc.publish(subject, b"{}")

    async def _on_event(self, msg: Msg) -> None:
        try:
            result = JobResult.from_json(msg.data)
            if result.job_id and result.status in agent_jobs.FINISHED:
                await agent_jobs.finish(
                    self.pool,
                    result.job_id,
                    result.status,
                    result.node_id or "",
                    result.result or "",
                    result.error or "",
                    result.trace_count,
                )
                return
            progress = JobProgress.from_json(msg.data)
            if not progress.job_id:
                return
            trace = (
                {"type": progress.trace_type, "content": progress.trace_content or ""}
                if progress.trace_type
                else None
            )
            await agent_jobs.progress(
                self.pool,
                progress.job_id,
                progress.status or "",
                progress.node_id or "",
                trace,
                progress.trace_seq or 0,
            )
        except (ValidationError, asyncpg.PostgresError) as exc:
            log.warning("could not record agent job event on %s: %s", msg.subject, exc)
