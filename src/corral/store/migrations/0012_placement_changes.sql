-- Incremental placement snapshots (issue 16): an append-only log of which nodes changed in a way placement
-- sees, written by triggers, so a frontend re-reads only those nodes instead of the whole fleet.
--
-- Each row carries the writing transaction's id. A reader remembers the xmin of its previous snapshot and
-- reads the rows whose change_xid >= that xmin: every transaction not yet visible to the previous snapshot
-- had an xid >= its xmin, so no commit is missed however the commits interleave (a plain sequence would
-- miss a transaction that took a number early and committed late). Only inserts: no row lock is shared
-- between writers, so the triggers add no lock-order hazard to the tables they watch.
CREATE TABLE IF NOT EXISTS placement_changes (
    id         bigserial PRIMARY KEY,
    node_id    varchar(36) NOT NULL,
    change_xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()  -- when written, not when its transaction began
);
CREATE INDEX IF NOT EXISTS idx_placement_changes_xid ON placement_changes (change_xid);
CREATE INDEX IF NOT EXISTS idx_placement_changes_at ON placement_changes (at);

CREATE OR REPLACE FUNCTION corral_placement_changed() RETURNS trigger AS $$
BEGIN
    IF TG_TABLE_NAME = 'backend_nodes' THEN
        INSERT INTO placement_changes (node_id) VALUES (COALESCE(NEW.id, OLD.id));
    ELSE
        INSERT INTO placement_changes (node_id) VALUES (COALESCE(NEW.node_id, OLD.node_id));
        IF TG_OP = 'UPDATE' AND NEW.node_id IS DISTINCT FROM OLD.node_id THEN
            INSERT INTO placement_changes (node_id) VALUES (OLD.node_id);
        END IF;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

-- A node row: only the columns a placement snapshot reads (a heartbeat that changes nothing placement
-- sees — last_heartbeat — logs nothing).
DROP TRIGGER IF EXISTS placement_changed_node_insert ON backend_nodes;
CREATE TRIGGER placement_changed_node_insert AFTER INSERT OR DELETE ON backend_nodes
    FOR EACH ROW EXECUTE FUNCTION corral_placement_changed();
DROP TRIGGER IF EXISTS placement_changed_node_update ON backend_nodes;
CREATE TRIGGER placement_changed_node_update AFTER UPDATE ON backend_nodes
    FOR EACH ROW WHEN (
        (OLD.name, OLD.node_type, OLD.address, OLD.http_address, OLD.status, OLD.approved, OLD.total_vram,
         OLD.available_vram, OLD.reserved_vram, OLD.vram_budget_bytes, OLD.total_disk, OLD.available_disk,
         OLD.max_replicas_per_model)
        IS DISTINCT FROM
        (NEW.name, NEW.node_type, NEW.address, NEW.http_address, NEW.status, NEW.approved, NEW.total_vram,
         NEW.available_vram, NEW.reserved_vram, NEW.vram_budget_bytes, NEW.total_disk, NEW.available_disk,
         NEW.max_replicas_per_model))
    EXECUTE FUNCTION corral_placement_changed();

DROP TRIGGER IF EXISTS placement_changed_labels ON node_labels;
CREATE TRIGGER placement_changed_labels AFTER INSERT OR UPDATE OR DELETE ON node_labels
    FOR EACH ROW EXECUTE FUNCTION corral_placement_changed();

DROP TRIGGER IF EXISTS placement_changed_replicas ON node_models;
CREATE TRIGGER placement_changed_replicas AFTER INSERT OR DELETE ON node_models
    FOR EACH ROW EXECUTE FUNCTION corral_placement_changed();
DROP TRIGGER IF EXISTS placement_changed_replica_update ON node_models;
CREATE TRIGGER placement_changed_replica_update AFTER UPDATE ON node_models
    FOR EACH ROW WHEN (
        (OLD.node_id, OLD.model_name, OLD.replica_index, OLD.state, OLD.address, OLD.in_flight, OLD.last_used,
         OLD.vram_bytes)
        IS DISTINCT FROM
        (NEW.node_id, NEW.model_name, NEW.replica_index, NEW.state, NEW.address, NEW.in_flight, NEW.last_used,
         NEW.vram_bytes))
    EXECUTE FUNCTION corral_placement_changed();
