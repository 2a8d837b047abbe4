"""`/api/nodes/scheduling` with autoscaling fields against a real PostgreSQL: stored and answered, replaced by the
next POST, a mistake is a 400 naming the field; the autoscaler's record of a pass is answered as the rule's
`autoscale` (its explain)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from corral.frontend.admin.scheduling_rules import build_scheduling_rules_router
from corral.frontend.errors import install_handlers
from corral.frontend.state import FrontendState
from corral.models.config import ModelConfig
from corral.store import scheduling as scheduling_store

URL = "http://frontend/api/nodes/scheduling"
SCHEDULE = {"days": ["sat", "sun"], "from": "22:00", "to": "06:00", "tz": "Asia/Tokyo", "min_replicas": 2}


class RouteRulesSeen:
    def apply_route_rule(self, rule: Any) -> None:
        pass

    def forget_route_rule(self, model: str) -> None:
        pass


@pytest.fixture
async def api(pool: asyncpg.Pool) -> AsyncIterator[httpx.AsyncClient]:
    none: Any = None
    router: Any = RouteRulesSeen()
    state = FrontendState(
        pool=pool,
        nc=none,
        router=router,
        registration_token="",
        auto_approve_nodes=True,
        configs={
            "llama3": ModelConfig(
                name="llama3", backend="simulator", model="", models_dir=Path("/nonexistent")
            )
        },
        aliases={},
    )
    app = FastAPI()
    install_handlers(app)
    app.include_router(build_scheduling_rules_router(state))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://frontend"
    ) as client:
        yield client


async def test_autoscaling_fields_are_stored_answered_and_replaced_by_the_next_post(
    api: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    body = {
        "model_name": "llama3",
        "min_replicas": 0,
        "max_replicas": 3,
        "target_queue_wait_s": 2,
        "target_ttft_s": 1.5,
        "scale_down_idle_s": 120,
        "cooldown_s": 30,
        "schedules": [SCHEDULE],
    }
    response = await api.post(URL, json=body)
    assert response.status_code == 200, response.text
    rule = response.json()
    assert (
        rule["target_queue_wait_s"],
        rule["target_ttft_s"],
        rule["scale_down_idle_s"],
        rule["cooldown_s"],
    ) == (
        2.0,
        1.5,
        120.0,
        30.0,
    )
    assert rule["schedules"] == [SCHEDULE]
    assert rule["autoscale"]["last_pass"] is None and rule["autoscale"]["min_replicas_now"] in (0, 2)
    await scheduling_store.autoscale_record(
        pool, "llama3", "queue wait p95 4.2 s > target 2 s: +1 replica (1 → 2)", 0, "queue wait …: +1", 1.8e9
    )
    view = (await api.get(f"{URL}/llama3")).json()
    assert view["status"]["autoscaler"] == "queue wait p95 4.2 s > target 2 s: +1 replica (1 → 2)"
    answered = view["autoscale"]
    assert answered["last_pass"] == "queue wait p95 4.2 s > target 2 s: +1 replica (1 → 2)"
    assert answered["last_action"] == "queue wait …: +1" and answered["last_action_at"].startswith(
        "2027-01-15"
    )
    replaced = (await api.post(URL, json={"model_name": "llama3", "min_replicas": 1})).json()
    assert not any(k in replaced for k in ("target_queue_wait_s", "schedules", "cooldown_s"))
    assert replaced["autoscale"]["last_action"] == "queue wait …: +1"  # the record (and its cooldown) stays


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"target_queue_wait_s": -1, "max_replicas": 2}, "target_queue_wait_s"),
        ({"target_ttft_s": True, "max_replicas": 2}, "target_ttft_s"),
        ({"target_queue_wait_s": 1}, "target_queue_wait_s"),
        ({"cooldown_s": "soon"}, "cooldown_s"),
        ({"schedules": [{**SCHEDULE, "tz": "Nowhere/Land"}]}, "schedules[0].tz"),
        ({"schedules": [SCHEDULE, {**SCHEDULE, "from": "25:00"}]}, "schedules[1].from"),
        ({"schedules": [{**SCHEDULE, "extra": 1}]}, "schedules[0].extra"),
    ],
)
async def test_a_wrong_autoscaling_field_is_a_400_naming_it(
    api: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    response = await api.post(URL, json={"model_name": "llama3", **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and f"field '{field}'" in error["message"]
