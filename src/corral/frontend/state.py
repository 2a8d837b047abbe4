"""What the frontend's routes need, built once at start (nothing held between requests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import asyncpg
from nats.aio.client import Client

from corral.frontend.inference.images import ImagePolicy
from corral.frontend.node_api.admission import Admission
from corral.models.config import ModelConfig
from corral.routing.router import Router
from corral.staging.stager import StagingContext


@dataclass
class FrontendState:
    pool: asyncpg.Pool
    nc: Client
    router: Router
    configs: dict[str, ModelConfig]
    registration_token: str
    auto_approve_nodes: bool
    config_revisions: Any = None  # corral.revisions.edits.ConfigRevisions (model config edits)
    expose_node_header: bool = False  # LOCALAI_EXPOSE_NODE_HEADER: X-LocalAI-Node on inference responses
    lifecycle: Any = None  # corral.nodes.lifecycle.NodeLifecycle (heartbeats, health, minting)
    figures: Any = None  # corral.frontend.cluster_figures.ClusterFigures (read at scrape / OTLP export time)
    agents: Any = (
        None  # corral.frontend.inference.agent_chat.AgentChat: models with `mcp:` servers (issue 13)
    )
    agent_jobs: Any = None  # corral.agents.recorder.JobRecorder: agent jobs on the agent workers (issue 13)
    mcp_max_iterations: int = 10
    aliases: dict[str, str] = field(
        default_factory=dict
    )  # alias -> model (models/aliases.py), shared with the router
    backend_ops: Any = None  # corral.nodes.backend_ops.BackendOpsDriver (durable backend intents, issue 11)
    admission: Admission = field(default_factory=Admission)  # registration rate, pending cap, auth throttle
    max_n: int = 8  # CORRAL_MAX_N: most choices (`n`) one generation request may ask for
    images: ImagePolicy = field(default_factory=ImagePolicy)  # CORRAL_IMAGE_*: image parts in chat requests
    staging: StagingContext | None = None  # how request files reach a worker (media_api.py, issue 23)
    transcription_max_bytes: int = 16 << 20  # an audio upload: CORRAL_INFERENCE_MAX_BODY bounds it
    generated_image_ttl_s: float = 3600.0  # CORRAL_GENERATED_IMAGE_TTL
    responses_ttl_s: float = 30 * 86400.0  # CORRAL_RESPONSES_TTL: how long a stored response is kept
