"""Pools for the CLI (``spawnflow pools``), without click."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError
from spawnflow.models.pool import DEFAULT_POOL, Pool
from spawnflow.processors.scheduler.queueing import pool_usage
from spawnflow.services.records import NotFound


def _record(pool: Pool, used: dict[str, int]) -> dict[str, Any]:
    return {
        "pool": pool.pool, "slots": pool.slots, "occupied": used.get(pool.pool, 0),
        "description": pool.description, "include_deferred": pool.include_deferred,
    }  # fmt: skip


def list_pools() -> list[dict[str, Any]]:
    """Every pool with the slots its queued and running task instances hold, by name."""
    with orm.session_scope(write=False) as session:
        pools = {pool.pool: pool for pool in session.scalars(select(Pool).order_by(Pool.pool))}
        used = pool_usage(session, pools)
        return [_record(pool, used) for pool in pools.values()]


def get_pool(name: str) -> dict[str, Any]:
    """One pool's record; NotFound if there is none of that name."""
    with orm.session_scope(write=False) as session:
        pool = session.get(Pool, name)
        if pool is None:
            raise NotFound(f"there is no pool {name!r}; see `spawnflow pools list`")
        return _record(pool, pool_usage(session, {name: pool}))


def set_pool(
    name: str, slots: int, description: str | None = None, include_deferred: bool | None = None
) -> bool:
    """Create pool ``name`` or change it; True if it was created.

    Shrinking a pool below the slots in use stops nothing: running tries finish, and no
    new one is queued until the pool has room again. ``None`` keeps what a pool had."""
    if not name.strip() or len(name) > 250:
        raise UserError(f"pool name {name!r} must have 1 to 250 characters")
    if slots < 0:
        raise UserError(f"pool {name!r}: slots {slots} must be 0 (paused) or more")
    with orm.session_scope() as session:
        pool = session.get(Pool, name, with_for_update=True)
        created = pool is None
        if pool is None:
            pool = Pool(pool=name, include_deferred=False)
            session.add(pool)
        pool.slots = slots
        if description is not None:
            pool.description = description
        if include_deferred is not None:
            pool.include_deferred = include_deferred
        return created


def delete_pool(name: str) -> None:
    """Delete pool ``name``; its waiting task instances then wait for it to be created."""
    if name == DEFAULT_POOL:
        raise UserError(f"{DEFAULT_POOL!r} cannot be deleted; change its slots instead")
    with orm.session_scope() as session:
        pool = session.get(Pool, name)
        if pool is None:
            raise NotFound(f"there is no pool {name!r}; see `spawnflow pools list`")
        session.delete(pool)
