"""What the frontend's routes need, built once at start (nothing held between requests).

`build_frontend` (frontend/main.py) makes one; tests make one with only the parts their routes read (the
optional parts are None: their routes are not installed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import asyncpg
from nats.aio.client import Client
from starlette.responses import Response

from corral.agents.client import AgentBus
from corral.agents.recorder import JobRecorder
from corral.frontend.cluster_figures import ClusterFigures
from corral.frontend.inference.images import ImagePolicy
from corral.frontend.inference.schemas import ChatCompletionRequest
from corral.frontend.node_api.admission import Admission
from corral.frontend.traffic_sampler import TrafficSampler
from corral.models.config import ModelConfig
from corral.models.routes import RouteTable
from corral.nodes.backend_ops import BackendOpsDriver, BackendOpSettings
from corral.nodes.lifecycle import NodeLifecycle
from corral.revisions.edits import ConfigRevisions
from corral.routing.router import Router
from corral.staging.stager import StagingContext
from corral.tenancy.ledger import UsageLedger
from corral.tenancy.limits import Limits

if TYPE_CHECKING:
    from corral.frontend.admin.model_gallery import ModelGallery


class AgentChats(Protocol):
    """The agent loop for models with `mcp:` servers (frontend/inference/agent_chat.py `AgentChat`; a
    Protocol because that module builds its routes over this state)."""

    bus: AgentBus

    async def chat(self, cfg: ModelConfig, body: ChatCompletionRequest) -> Response: ...


@dataclass
class FrontendState:
    pool: asyncpg.Pool
    nc: Client
    router: Router
    configs: dict[str, ModelConfig]
    registration_token: str
    auto_approve_nodes: bool
    config_revisions: ConfigRevisions | None = None  # model config edits
    expose_node_header: bool = False  # LOCALAI_EXPOSE_NODE_HEADER: X-LocalAI-Node on inference responses
    lifecycle: NodeLifecycle | None = None  # heartbeats, health, minting
    figures: ClusterFigures | None = None  # read at scrape / OTLP export time
    agents: AgentChats | None = None  # models with `mcp:` servers (issue 13)
    agent_jobs: JobRecorder | None = None  # agent jobs on the agent workers (issue 13)
    mcp_max_iterations: int = 10
    aliases: dict[str, str] = field(
        default_factory=dict
    )  # alias -> model (models/aliases.py), shared with the router
    backend_ops: BackendOpsDriver | None = None  # durable backend intents (issue 11)
    admission: Admission = field(default_factory=Admission)  # registration rate, pending cap, auth throttle
    max_n: int = 8  # CORRAL_MAX_N: most choices (`n`) one generation request may ask for
    images: ImagePolicy = field(default_factory=ImagePolicy)  # CORRAL_IMAGE_*: image parts in chat requests
    staging: StagingContext | None = None  # how request files reach a worker (media_api.py, issue 23)
    transcription_max_bytes: int = 16 << 20  # an audio upload: CORRAL_INFERENCE_MAX_BODY bounds it
    generated_image_ttl_s: float = 3600.0  # CORRAL_GENERATED_IMAGE_TTL
    responses_ttl_s: float = 30 * 86400.0  # CORRAL_RESPONSES_TTL: how long a stored response is kept
    files_max_bytes: int = 100 << 20  # CORRAL_FILES_MAX_BYTES: the largest upload to /v1/files
    usage: UsageLedger | None = None  # per key x model x hour usage, flushed in batches (issue 25)
    key_limits: Limits | None = (
        None  # API keys' rate limits and quotas, checked by the access layer (issue 25)
    )
    routes: RouteTable = field(default_factory=RouteTable)  # model routes (issue 25), kept by route_sync
    traffic: TrafficSampler | None = None  # the last hour's traffic series, GET /api/traffic (issue 26)
    model_gallery: ModelGallery | None = None  # /models/available, /models/apply (issue 26)

    def backend_op_settings(self) -> BackendOpSettings:
        """The node-operation timeouts (their routes are installed only with the backend-ops driver)."""
        if self.backend_ops is None:
            raise RuntimeError("no backend-ops driver: the node operation routes are not installed")
        return self.backend_ops.settings
