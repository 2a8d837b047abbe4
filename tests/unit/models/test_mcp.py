"""The `mcp:` / `agent:` blocks of a model config: the reference's shape, and refusals naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.models.config import ModelConfigError, parse_model_config
from corral.models.mcp import MCPConfigError, from_wire, parse_mcp

STDIO = '{"mcpServers": {"tools": {"command": "python3", "args": ["server.py", 7], "env": {"K": "v"}}}}'
REMOTE = "mcpServers:\n  search:\n    url: https://mcp.example/mcp\n    token: t0k\n"


def test_the_references_string_documents_parse_into_servers() -> None:
    servers = parse_mcp({"stdio": STDIO, "remote": REMOTE}, {"max_iterations": 4})
    assert [(s.name, s.command, s.args, s.env) for s in servers.stdio] == [
        ("tools", "python3", ("server.py", "7"), (("K", "v"),))
    ]
    assert [(r.name, r.url, r.token) for r in servers.remote] == [
        ("search", "https://mcp.example/mcp", "t0k")
    ]
    assert servers.max_iterations == 4 and bool(servers)
    wire = servers.wire()  # what travels to the agent workers, parsed there with the same checks
    back = from_wire(wire["stdio_servers"], wire["remote_servers"])
    assert (back.stdio, back.remote) == (servers.stdio, servers.remote)


def test_a_mapping_is_accepted_as_well_and_no_block_means_no_servers() -> None:
    servers = parse_mcp({"stdio": {"mcpServers": {"t": {"command": "x"}}}}, None)
    assert servers.stdio[0].command == "x"
    assert not parse_mcp(None, None) and not parse_mcp({}, None)


@pytest.mark.parametrize(
    ("mcp", "agent", "field"),
    [
        ("nope", None, "field 'mcp'"),
        ({"stdio": STDIO, "extra": 1}, None, "unknown keys"),
        ({"stdio": "{not yaml: ["}, None, "mcp.stdio"),
        ({"stdio": {"mcpServers": {"../x": {"command": "a"}}}}, None, "server name"),
        ({"stdio": {"mcpServers": {"t": {"args": []}}}}, None, "mcp.stdio.mcpServers.t.command"),
        ({"stdio": {"mcpServers": {"t": {"command": "a", "args": "x"}}}}, None, "args"),
        (
            {"remote": {"mcpServers": {"r": {"url": "file:///etc/passwd"}}}},
            None,
            "mcp.remote.mcpServers.r.url",
        ),
        (
            {
                "stdio": {"mcpServers": {"t": {"command": "a"}}},
                "remote": {"mcpServers": {"t": {"url": "http://h"}}},
            },
            None,
            "both stdio and remote",
        ),
        ({"stdio": STDIO}, {"max_iterations": 10**9}, "agent.max_iterations"),
        ({"stdio": STDIO}, {"max_iterations": True}, "agent.max_iterations"),
        ({"stdio": {"mcpServers": {f"s{i}": {"command": "a"} for i in range(40)}}}, None, "at most 32"),
    ],
)
def test_a_bad_block_is_refused_naming_the_field(mcp: object, agent: object, field: str) -> None:
    with pytest.raises(MCPConfigError, match=field.replace(".", r"\.").replace("(", r"\(")):
        parse_mcp(mcp, agent)


def test_a_model_config_carries_its_servers_and_a_bad_block_names_the_file(tmp_path: Path) -> None:
    cfg = parse_model_config(
        {"name": "m", "backend": "simulator", "mcp": {"stdio": STDIO}}, tmp_path / "m.yaml", tmp_path
    )
    assert cfg.mcp.stdio[0].name == "tools"
    with pytest.raises(ModelConfigError, match=r"m\.yaml: field 'mcp\.remote\.mcpServers\.r\.url'"):
        parse_model_config(
            {"name": "m", "backend": "simulator", "mcp": {"remote": {"mcpServers": {"r": {}}}}},
            tmp_path / "m.yaml",
            tmp_path,
        )
