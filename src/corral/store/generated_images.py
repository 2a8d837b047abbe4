"""Generated images kept for their URL (`generated_images`): /v1/images/generations with response_format "url"
stores each PNG here for CORRAL_GENERATED_IMAGE_TTL; any frontend serves it by its unguessable id."""

from __future__ import annotations

import asyncpg

from corral.store.queries import delete_in_batches, q

SWEEP_BATCH = 200  # rows deleted per statement (an image is up to a few MB)


async def insert(pool: asyncpg.Pool, image_id: str, png: bytes, ttl_s: float) -> None:
    await pool.execute(q("generated_image_insert"), image_id, png, ttl_s)


async def png(pool: asyncpg.Pool, image_id: str) -> bytes | None:
    """The PNG bytes; None when unknown or expired."""
    return await pool.fetchval(q("generated_image_png"), image_id)  # type: ignore[no-any-return]


async def sweep(pool: asyncpg.Pool) -> int:
    """Delete every expired image; returns how many."""
    return await delete_in_batches(pool, "generated_images_sweep", SWEEP_BATCH)
