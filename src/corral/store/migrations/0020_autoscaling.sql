-- Autoscaling on load (issue 25 item 5): a scheduling rule's load targets, idle window, cooldown and schedule
-- windows (NULL = off; cooldown NULL = CORRAL_AUTOSCALE_COOLDOWN), and what the reconciler last made of its
-- load: the reason of its last pass, the consecutive passes over target (hysteresis) and the last action.
ALTER TABLE model_scheduling_configs
    ADD COLUMN IF NOT EXISTS target_queue_wait_s      double precision,
    ADD COLUMN IF NOT EXISTS target_ttft_s            double precision,
    ADD COLUMN IF NOT EXISTS scale_down_idle_s        double precision,
    ADD COLUMN IF NOT EXISTS autoscale_cooldown_s     double precision,
    ADD COLUMN IF NOT EXISTS schedules                jsonb NOT NULL DEFAULT '[]'::jsonb,
    ADD COLUMN IF NOT EXISTS autoscale_reason         text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS autoscale_checked_at     timestamptz,
    ADD COLUMN IF NOT EXISTS autoscale_over_passes    bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS autoscale_last_action    text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS autoscale_last_action_at timestamptz;
