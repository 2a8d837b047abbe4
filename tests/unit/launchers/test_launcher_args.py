"""The command lines the followers build (the reference's worker_vllm_test table) and their refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.config.errors import ConfigError
from corral.config.launchers import Ds4Settings, VllmFollowerSettings
from corral.config.settings import resolve
from corral.launchers import ds4, vllm
from corral.node.hardware import HardwareFacts


def follower(**values: str) -> VllmFollowerSettings:
    return resolve(VllmFollowerSettings, values, {})


TOPOLOGY = {
    "data_parallel_size": "4",
    "data_parallel_size_local": "2",
    "start_rank": "2",
    "master_addr": "10.0.0.1",
    "master_port": "32100",
}


def test_headless_follower_argv() -> None:
    assert vllm.vllm_args("Qwen/Qwen3.5-1.5B", follower(**TOPOLOGY), []) == [
        "serve",
        "Qwen/Qwen3.5-1.5B",
        "--headless",
        "--data-parallel-size",
        "4",
        "--data-parallel-size-local",
        "2",
        "--data-parallel-start-rank",
        "2",
        "--data-parallel-address",
        "10.0.0.1",
        "--data-parallel-rpc-port",
        "32100",
    ]


def test_head_style_invocation_is_not_headless() -> None:
    s = follower(
        **{
            **TOPOLOGY,
            "start_rank": "0",
            "headless": "false",
            "data_parallel_size": "8",
            "data_parallel_size_local": "4",
        }
    )
    vllm.check_topology(s)
    assert "--headless" not in vllm.vllm_args("m", s, [])


def test_extra_args_are_appended_verbatim() -> None:
    args = vllm.vllm_args(
        "m", follower(**TOPOLOGY), ["--tensor-parallel-size", "2", "--enable-expert-parallel"]
    )
    assert args[-3:] == ["--tensor-parallel-size", "2", "--enable-expert-parallel"]


def test_env_carries_the_topology_too() -> None:
    assert vllm.vllm_env(follower(**TOPOLOGY)) == {
        "VLLM_DP_MASTER_IP": "10.0.0.1",
        "VLLM_DP_MASTER_PORT": "32100",
        "VLLM_DP_SIZE": "4",
        "VLLM_DP_RANK": "2",
        "VLLM_DP_RANK_LOCAL": "0",
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"start_rank": "0"}, "cannot be --headless"),
        ({"data_parallel_size_local": "5"}, "exceeds --data-parallel-size 4"),
        ({"start_rank": "3"}, "ranks 3..4 of this node exceed"),
    ],
)
def test_impossible_topologies_are_refused(change: dict[str, str], message: str) -> None:
    with pytest.raises(vllm.TopologyError, match=message):
        vllm.check_topology(follower(**{**TOPOLOGY, **change}))


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("master_port", "0"),
        ("master_port", "70000"),
        ("data_parallel_size", "0"),
        ("start_rank", "-1"),
        ("data_parallel_size", "99999999999999999999x"),
    ],
)
def test_out_of_range_flags_name_the_flag(field: str, raw: str) -> None:
    with pytest.raises(ConfigError, match="--" + field.replace("_", "-")):
        follower(**{**TOPOLOGY, field: raw})


def test_registration_is_an_agent_node_with_the_follower_role() -> None:
    body = vllm.registration_body(
        follower(**TOPOLOGY, node_name="f1", node_labels="tier=fast,node.role=x"),
        HardwareFacts(total_vram=8 << 30),
    )
    assert body["node_type"] == "agent" and body["name"] == "f1" and "address" not in body
    assert body["total_vram"] == body["available_vram"] == 8 << 30
    assert body["labels"] == {"tier": "fast", "node.role": "vllm-follower"}


def test_ds4_uses_the_bundled_loader_when_present(tmp_path: Path) -> None:
    binary = tmp_path / "ds4" / "ds4-worker"
    (tmp_path / "ds4" / "lib").mkdir(parents=True)
    s = resolve(Ds4Settings, {}, {})
    assert ds4.exec_argv(binary, ["--role", "worker"], s)[1] == [str(binary), "--role", "worker"]
    (tmp_path / "ds4" / "lib" / "ld.so").write_text("")
    program, argv, env = ds4.exec_argv(binary, ["--role", "worker"], s)
    assert program == str(tmp_path / "ds4" / "lib" / "ld.so") and argv[1:] == [
        str(binary),
        "--role",
        "worker",
    ]
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path / "ds4" / "lib")


def test_ds4_args_from_the_env_when_nothing_follows_the_separator(tmp_path: Path) -> None:
    s = resolve(Ds4Settings, {}, {"LOCALAI_EXTRA_DS4_ARGS": "--role worker --coordinator 'h 1' 1234"})
    assert ds4.exec_argv(tmp_path / "ds4-worker", [], s)[1][1:] == [
        "--role",
        "worker",
        "--coordinator",
        "h 1",
        "1234",
    ]
    with pytest.raises(ConfigError, match="usage: corral worker ds4-distributed --"):
        ds4.exec_argv(tmp_path / "ds4-worker", [], resolve(Ds4Settings, {}, {}))
