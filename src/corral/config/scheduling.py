"""Settings of model scheduling (issue 6): declarative rules at boot and the replica reconciler's pace.

The declarative values are kept raw here (a JSON text, a file path); `replicas/scheduling_seed.py`
validates them at start and names the entry and field of any mistake.
"""

from __future__ import annotations

from corral.config.parse import parse_bool, parse_duration_s, parse_positive_int
from corral.config.settings import setting, settings_class


@settings_class
class FrontendSchedulingSettings:
    """Declarative scheduling rules, the replica reconciler, prefix-cache routing."""

    model_scheduling: str = setting(
        "--model-scheduling",
        "LOCALAI_MODEL_SCHEDULING",
        default="",
        help='scheduling rules as an inline JSON list, e.g. [{"model_name":"m","replicas":"all"}]; '
        "re-applied on every boot, replacing the listed models' rules (others untouched)",
    )
    model_scheduling_config: str = setting(
        "--model-scheduling-config",
        "LOCALAI_MODEL_SCHEDULING_CONFIG",
        default="",
        help="YAML file with a list of scheduling rules (same fields as LOCALAI_MODEL_SCHEDULING), "
        "re-applied on every boot",
    )
    reconciler_interval_s: float = setting(
        "--reconciler-interval",
        "CORRAL_RECONCILER_INTERVAL",
        default=30.0,
        parse=parse_duration_s,
        help="how often the replica reconciler checks every scheduling rule",
    )
    scale_down_idle_s: float = setting(
        "--scale-down-idle",
        "CORRAL_SCALE_DOWN_IDLE",
        default=300.0,
        parse=parse_duration_s,
        help="a replica above a rule's minimum with nothing in flight for this long is stopped",
    )
    unsatisfiable_cooldown_s: float = setting(
        "--unsatisfiable-cooldown",
        "CORRAL_UNSATISFIABLE_COOLDOWN",
        default=300.0,
        parse=parse_duration_s,
        help="after 3 passes that cannot satisfy a rule, the reconciler leaves it alone this "
        "long (a node registering, approval, label or budget change ends the wait)",
    )
    prefix_cache: bool = setting(
        "--distributed-prefix-cache",
        "LOCALAI_DISTRIBUTED_PREFIX_CACHE",
        default=True,
        parse=parse_bool,
        help='models whose scheduling rule leaves route_policy "" route by prefix cache (true) or to the least '
        "loaded replica (false)",
        is_switch=True,
    )
    prefix_cache_ttl_s: float = setting(
        "--distributed-prefix-cache-ttl",
        "LOCALAI_DISTRIBUTED_PREFIX_CACHE_TTL",
        default=300.0,
        parse=parse_duration_s,
        help="a prompt prefix routed to a replica is remembered this long (prefix_cache policy)",
    )
    prefix_index_max_blocks: int = setting(
        "--prefix-index-max-blocks",
        "CORRAL_PREFIX_INDEX_MAX_BLOCKS",
        default=100_000,
        parse=parse_positive_int,
        help="bound of the prefix index (256-character prompt blocks; least recent evicted)",
    )
