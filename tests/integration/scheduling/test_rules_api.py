"""`/api/nodes/scheduling` against a real PostgreSQL: validation (400 naming the field), alias conflicts (409
naming the rule), shadowing, PATCH-style routing overrides, 404s."""

from __future__ import annotations

import asyncio
import json
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
from corral.placement.rules import RuleSpec
from corral.store import scheduling as scheduling_store

URL = "http://frontend/api/nodes/scheduling"


def _config(name: str) -> ModelConfig:
    return ModelConfig(name=name, backend="simulator", model="", models_dir=Path("/nonexistent"))


class RouteRulesSeen:
    """The router's side of a rule edit: this frontend applies a stored rule's route policy at once."""

    def __init__(self) -> None:
        self.applied: list[Any] = []
        self.forgotten: list[str] = []

    def apply_route_rule(self, rule: Any) -> None:
        self.applied.append(rule)

    def forget_route_rule(self, model: str) -> None:
        self.forgotten.append(model)


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
        configs={n: _config(n) for n in ("llama3", "llama4")},
        aliases={"production": "llama3", "canary": "production", "retired": "llama2"},
    )
    app = FastAPI()
    install_handlers(app)
    app.include_router(build_scheduling_rules_router(state))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://frontend"
    ) as client:
        yield client


async def test_a_rule_is_stored_and_answered_like_the_reference(api: httpx.AsyncClient) -> None:
    body = {
        "model_name": "llama3",
        "node_selector": {"gpu.vendor": "nvidia"},
        "min_replicas": 2,
        "max_replicas": 4,
    }
    response = await api.post(URL, json=body)
    assert response.status_code == 200, response.text
    rule = response.json()
    assert json.loads(rule["node_selector"]) == {"gpu.vendor": "nvidia"}  # a JSON string, as the reference
    assert (rule["min_replicas"], rule["max_replicas"], rule["target"], rule["shadowed"]) == (
        2,
        4,
        "llama3",
        False,
    )
    assert "spread_all" not in rule and "route_policy" not in rule  # omitempty
    assert rule["status"] == {"state": "active", "replicas": 0, "message": "0 replica(s) of llama3 loaded"}
    assert (await api.get(f"{URL}/llama3")).json()["id"] == rule["id"]
    assert [r["model_name"] for r in (await api.get(URL)).json()] == ["llama3"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"model_name": "llama3", "min_replicas": 3, "max_replicas": 1}, "min_replicas"),
        ({"model_name": "llama3", "replicas": "all", "max_replicas": 2}, "max_replicas"),
        ({"model_name": "llama3", "route_policy": "random"}, "route_policy"),
        ({"model_name": "llama3", "balance_rel_threshold": 0.2}, "balance_rel_threshold"),
        ({"model_name": "llama3", "min_prefix_match": -0.1}, "min_prefix_match"),
        ({"model_name": "llama3", "balance_abs_threshold": -3}, "balance_abs_threshold"),
        ({"min_replicas": 1}, "model_name"),
        ({"model_name": "llama3", "node_selector": ["gpu"]}, "node_selector"),
        ({"model_name": "llama3", "minReplicas": 1}, "minReplicas"),
    ],
)
async def test_an_invalid_rule_is_a_400_naming_the_field(
    api: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    response = await api.post(URL, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == field and f"field '{field}'" in error["message"]
    assert (await api.get(URL)).json() == []


async def test_a_body_that_is_not_json_is_a_400(api: httpx.AsyncClient) -> None:
    response = await api.post(URL, content=b"{min_replicas: 1", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "body"


@pytest.mark.parametrize(
    "alias, problem",
    [
        ("retired", "alias 'retired' points at 'llama2', which is not a configured model"),
        ("canary", "alias 'canary' points at another alias 'production'; point it at a model"),
    ],
)
async def test_a_rule_keyed_by_an_alias_that_resolves_to_nothing_is_refused(
    api: httpx.AsyncClient, alias: str, problem: str
) -> None:
    response = await api.post(URL, json={"model_name": alias, "min_replicas": 1})
    assert response.status_code == 400
    assert (
        problem in response.json()["error"]["message"] and response.json()["error"]["param"] == "model_name"
    )


async def test_a_rule_for_a_model_already_governed_through_an_alias_is_a_409_naming_that_rule(
    api: httpx.AsyncClient,
) -> None:
    assert (await api.post(URL, json={"model_name": "production", "min_replicas": 2})).status_code == 200
    response = await api.post(URL, json={"model_name": "llama3", "max_replicas": 3})
    assert response.status_code == 409
    assert response.json()["error"]["message"].startswith(
        "scheduling rule for 'llama3' conflicts: model 'llama3' is already governed by scheduling rule 'production'"
    )
    assert (
        await api.post(URL, json={"model_name": "production", "min_replicas": 3})
    ).status_code == 200  # update


async def test_an_alias_rule_for_a_model_that_has_its_own_rule_is_a_409(api: httpx.AsyncClient) -> None:
    await api.post(URL, json={"model_name": "llama3", "min_replicas": 1})
    response = await api.post(URL, json={"model_name": "production", "min_replicas": 2})
    assert response.status_code == 409
    assert (
        "scheduling rule for 'production' (alias of 'llama3') conflicts: model 'llama3' is already governed "
        "by scheduling rule 'llama3'"
    ) in response.json()["error"]["message"]


async def test_two_admins_racing_for_one_model_cannot_both_win(api: httpx.AsyncClient) -> None:
    answers = await asyncio.gather(
        api.post(URL, json={"model_name": "llama3", "min_replicas": 1}),
        api.post(URL, json={"model_name": "production", "min_replicas": 1}),
    )
    assert sorted(a.status_code for a in answers) == [200, 409]


async def test_a_pair_created_by_a_seed_reports_the_shadowed_rule(
    api: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await scheduling_store.seed(pool, [RuleSpec("production", min_replicas=2)])
    await asyncio.sleep(0.01)
    await scheduling_store.seed(pool, [RuleSpec("llama3", min_replicas=1)])
    rules = {r["model_name"]: r for r in (await api.get(URL)).json()}
    assert rules["llama3"]["shadowed"] is False and rules["llama3"]["declared"] is True
    assert rules["production"]["shadowed"] is True and rules["production"]["shadowed_by"] == "llama3"
    assert rules["production"]["status"]["state"] == "shadowed"


async def test_routing_overrides_not_sent_keep_their_stored_value(api: httpx.AsyncClient) -> None:
    first = await api.post(
        URL,
        json={
            "model_name": "llama4",
            "route_policy": "prefix_cache",
            "min_prefix_match": 0.5,
            "balance_rel_threshold": 2,
            "balance_abs_threshold": 4,
        },
    )
    assert first.status_code == 200, first.text
    rule = (await api.post(URL, json={"model_name": "llama4", "min_replicas": 1})).json()
    assert (rule["route_policy"], rule["min_prefix_match"], rule["min_replicas"]) == ("prefix_cache", 0.5, 1)
    rule = (await api.post(URL, json={"model_name": "llama4", "route_policy": ""})).json()
    assert "route_policy" not in rule and rule["min_replicas"] == 0  # full replace of the replica fields


async def test_an_unsatisfiable_rule_says_why_in_its_status(
    api: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await api.post(URL, json={"model_name": "llama4", "min_replicas": 2})
    reason = "llama4 needs 2 more replica(s) but no healthy worker node is registered"
    await scheduling_store.unsatisfied(pool, "llama4", reason, "fp", 300.0)
    status = (await api.get(f"{URL}/llama4")).json()["status"]
    assert status["state"] == "unsatisfiable" and status["message"].endswith(reason)
    for _ in range(2):
        await scheduling_store.unsatisfied(pool, "llama4", reason, "fp", 300.0)
    rule = (await api.get(f"{URL}/llama4")).json()
    assert rule["unsatisfiable_ticks"] == 3 and rule["unsatisfiable_until"]
    assert rule["status"]["state"] == "cooling_down" and reason in rule["status"]["message"]
    await scheduling_store.clear_cooldowns(pool)  # e.g. a node registered
    assert (await api.get(f"{URL}/llama4")).json()["status"]["state"] == "waiting"


async def test_get_and_delete_of_an_unknown_rule_are_404s(api: httpx.AsyncClient) -> None:
    await api.post(URL, json={"model_name": "llama3", "min_replicas": 1})
    assert (await api.delete(f"{URL}/llama3")).status_code == 204
    missing = await api.delete(f"{URL}/llama3")
    assert (
        missing.status_code == 404 and "no scheduling rule for 'llama3'" in missing.json()["error"]["message"]
    )
    assert (await api.get(f"{URL}/llama3")).status_code == 404
