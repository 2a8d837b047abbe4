-- The VRAM estimate each replica was placed with: eviction frees exactly as many replicas as a fit needs.
ALTER TABLE node_models ADD COLUMN IF NOT EXISTS vram_bytes bigint NOT NULL DEFAULT 0;
