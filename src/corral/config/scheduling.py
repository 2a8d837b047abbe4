"""Settings of model scheduling (issue 6): declarative rules at boot and the replica reconciler's pace.

The declarative values are kept raw here (a JSON text, a file path); `replicas/scheduling_seed.py`
validates them at start and names the entry and field of any mistake.
"""

from __future__ import annotations

from corral.config.parse import parse_bool, parse_duration_s, parse_positive_int
from corral.config.settings import Setting

FRONTEND_SCHEDULING_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "model_scheduling",
        "--model-scheduling",
        ("LOCALAI_MODEL_SCHEDULING",),
        "",
        help='scheduling rules as an inline JSON list, e.g. [{"model_name":"m","replicas":"all"}]; '
        "re-applied on every boot, replacing the listed models' rules (others untouched)",
    ),
    Setting(
        "model_scheduling_config",
        "--model-scheduling-config",
        ("LOCALAI_MODEL_SCHEDULING_CONFIG",),
        "",
        help="YAML file with a list of scheduling rules (same fields as LOCALAI_MODEL_SCHEDULING), "
        "re-applied on every boot",
    ),
    Setting(
        "reconciler_interval_s",
        "--reconciler-interval",
        ("CORRAL_RECONCILER_INTERVAL",),
        30.0,
        parse_duration_s,
        "how often the replica reconciler checks every scheduling rule",
    ),
    Setting(
        "scale_down_idle_s",
        "--scale-down-idle",
        ("CORRAL_SCALE_DOWN_IDLE",),
        300.0,
        parse_duration_s,
        "a replica above a rule's minimum with nothing in flight for this long is stopped",
    ),
    Setting(
        "unsatisfiable_cooldown_s",
        "--unsatisfiable-cooldown",
        ("CORRAL_UNSATISFIABLE_COOLDOWN",),
        300.0,
        parse_duration_s,
        "after 3 passes that cannot satisfy a rule, the reconciler leaves it alone this "
        "long (a node registering, approval, label or budget change ends the wait)",
    ),
    Setting(
        "prefix_cache",
        "--distributed-prefix-cache",
        ("LOCALAI_DISTRIBUTED_PREFIX_CACHE",),
        True,
        parse_bool,
        'models whose scheduling rule leaves route_policy "" route by prefix cache (true) or to the least '
        "loaded replica (false)",
        is_switch=True,
    ),
    Setting(
        "prefix_cache_ttl_s",
        "--distributed-prefix-cache-ttl",
        ("LOCALAI_DISTRIBUTED_PREFIX_CACHE_TTL",),
        300.0,
        parse_duration_s,
        "a prompt prefix routed to a replica is remembered this long (prefix_cache policy)",
    ),
    Setting(
        "prefix_index_max_blocks",
        "--prefix-index-max-blocks",
        ("CORRAL_PREFIX_INDEX_MAX_BLOCKS",),
        100_000,
        parse_positive_int,
        "bound of the prefix index (256-character prompt blocks; least recent evicted)",
    ),
)
