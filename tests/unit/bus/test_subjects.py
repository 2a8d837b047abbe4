"""NATS subject builders: one token per ID, so no ID can add a level or a wildcard."""

from __future__ import annotations

import pytest

from corral.bus import subjects
from corral.bus.subjects import token


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        ("node-1", "node-1"),
        ("a.b", "a-b"),
        ("*", "-"),
        (">", "-"),
        ("a b\tc\nd", "a-b-c-d"),
        ("", ""),
        ("ünïcode", "ünïcode"),
        ("3f2a9c1e-7d4b-4e8a-9f00-1234567890ab", "3f2a9c1e-7d4b-4e8a-9f00-1234567890ab"),
    ],
)
def test_a_token_replaces_separators_wildcards_and_whitespace(value: str, safe: str) -> None:
    assert token(value) == safe


@pytest.mark.parametrize("value", ["a\rb", "a\x0bb", "a\x0cb"])
def test_a_token_holds_no_whitespace_at_all(value: str) -> None:
    assert not any(ch.isspace() for ch in token(value))


def test_node_subjects_have_exactly_one_token_for_the_node() -> None:
    builders = [
        subjects.backend_install,
        subjects.backend_upgrade,
        subjects.backend_delete,
        subjects.backend_list,
        subjects.backend_stop,
        subjects.model_stop,
        subjects.models_running,
        subjects.node_stop,
        subjects.model_unload,
        subjects.model_delete,
        subjects.backend_logs,
    ]
    for build in builders:
        subject = build("evil.>.node")
        assert subject.startswith("nodes.evil---node.")
        assert "*" not in subject and ">" not in subject


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        (subjects.backend_install("n1"), "nodes.n1.backend.install"),
        (subjects.backend_install_progress("n1", "op.1"), "nodes.n1.backend.install.op-1.progress"),
        (subjects.backend_upgrade("n1"), "nodes.n1.backend.upgrade"),
        (subjects.backend_delete("n1"), "nodes.n1.backend.delete"),
        (subjects.backend_list("n1"), "nodes.n1.backend.list"),
        (subjects.backend_stop("n1"), "nodes.n1.backend.stop"),
        (subjects.model_stop("n1"), "nodes.n1.model.stop"),
        (subjects.models_running("n1"), "nodes.n1.models.running"),
        (subjects.node_stop("n1"), "nodes.n1.stop"),
        (subjects.model_unload("n1"), "nodes.n1.model.unload"),
        (subjects.model_delete("n1"), "nodes.n1.model.delete"),
        (subjects.backend_logs("n1"), "nodes.n1.backend.logs"),
        (subjects.backend_log_lines("n1", "llama.3*"), "nodes.n1.backend.logs.llama-3-.lines"),
        (subjects.job_progress("j.1"), "jobs.j-1.progress"),
        (subjects.job_result("j>"), "jobs.j-.result"),
        (subjects.job_cancel("j 1"), "jobs.j-1.cancel"),
        (subjects.agent_cancel("j.1"), "agent.j-1.cancel"),
        (subjects.agent_events("bot.a", "u*"), "agent.bot-a.events.u-"),
    ],
)
def test_each_subject_reads_as_the_reference_names_it(subject: str, expected: str) -> None:
    assert subject == expected


def test_the_agent_worker_subjects_are_fixed_names() -> None:
    assert (subjects.AGENT_QUEUE, subjects.MCP_TOOLS_EXECUTE, subjects.MCP_DISCOVERY) == (
        "agent-workers",
        "mcp.tools.execute",
        "mcp.discovery",
    )
    assert (subjects.AGENT_EXECUTE, subjects.MCP_CI_JOBS_NEW) == ("agent.execute", "jobs.mcp-ci.new")
