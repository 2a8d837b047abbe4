"""A mistake in the declarative scheduling rules stops the frontend at start, naming the entry and field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_bad_declarative_rule_stops_the_frontend_with_one_line(tmp_path: Path) -> None:
    rules = tmp_path / "scheduling.yaml"
    rules.write_text(
        "- model_name: gpt-oss\n  replicas: all\n- model_name: whisper\n  min_replicas: 3\n"
        "  max_replicas: 1\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "corral",
            "run",
            "--nats-url",
            "nats://127.0.0.1:1",
            "--database-url",
            "postgresql://x@127.0.0.1:1/db",
            "--registration-token",
            "t",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LOCALAI_MODEL_SCHEDULING_CONFIG": str(rules)},
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"corral run: LOCALAI_MODEL_SCHEDULING_CONFIG ({rules}) entry 2 (model_name 'whisper'): field "
        "'min_replicas': must not exceed max_replicas (3 > 1); max_replicas 0 means no upper bound"
    )
