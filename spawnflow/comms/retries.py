"""How long a failed try waits before the next one: a fixed delay, or Airflow's
exponential backoff with jitter.

Both the worker that records a failed try and the scheduler that fails one from
outside (a lost worker, a heartbeat that timed out, a trigger that failed) compute the
wait here, from the same numbers, so a try gets the same wait whoever ends it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

#: The longest wait any backoff reaches, in seconds (Airflow's default
#: ``[core] max_task_retry_delay``: a day). It also keeps ``2 ** n`` within what a
#: ``timedelta`` can hold after many tries.
MAX_RETRY_DELAY = 24 * 60 * 60.0

#: ``jitter(key, span)``: a whole number of seconds in ``[0, span)``.
Jitter = Callable[[str, int], int]


def hashed_jitter(key: str, span: int) -> int:
    """Airflow's jitter: the SHA-1 of the try's key, modulo ``span``. Deterministic,
    so that two processes computing the wait of one try agree, and spread, so that
    tasks failing together do not all come back at the same second."""
    digest = hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()
    return int(digest, 16) % span


def retry_wait(
    retry_delay: float,
    try_number: int,
    *,
    exponential_backoff: bool = False,
    max_retry_delay: float | None = None,
    key: str = "",
    jitter: Jitter = hashed_jitter,
) -> float:
    """Seconds between the end of try ``try_number`` (1 for the first) and the next try.

    Without backoff it is ``retry_delay``. With it, as Airflow's
    ``TaskInstance.next_retry_datetime`` computes it: the base is
    ``ceil(retry_delay * 2 ** (try_number - 1))`` seconds, at least 1; the wait is the
    base plus a jitter in ``[0, base)`` (so between one and two bases), capped at
    :data:`MAX_RETRY_DELAY` and then at ``max_retry_delay``. What we kept: Airflow's
    arithmetic, its deterministic SHA-1 jitter and its caps. What differs: the key of
    the jitter is the caller's (the task instance's id and the try number, which every
    process that ends a try knows, where Airflow hashes the logical date), and
    ``jitter`` can be replaced (tests pass a function of their own). Airflow 3.1 also
    takes a number for the base of the power; here ``True`` means 2.

    Args:
        retry_delay: the task's ``retry_delay``, in seconds.
        try_number: the try that failed.
        exponential_backoff: the task's ``retry_exponential_backoff``.
        max_retry_delay: the task's ``max_retry_delay`` in seconds; None: no cap but
            :data:`MAX_RETRY_DELAY`.
        key: identifies the try, for the jitter.
        jitter: ``jitter(key, span)`` returns a whole number in ``[0, span)``.
    """
    if not exponential_backoff:
        return retry_delay
    try:
        base = math.ceil(retry_delay * 2 ** max(try_number - 1, 0))
    except OverflowError:  # a float power past 1e308: the cap applies anyway
        base = int(MAX_RETRY_DELAY)
    base = min(max(base, 1), int(MAX_RETRY_DELAY))
    wait = min(float(base + jitter(key, base)), MAX_RETRY_DELAY)
    if max_retry_delay is not None:
        wait = min(wait, max_retry_delay)
    return wait


def try_key(dag_id: str, task_id: str, ti_id: int, try_number: int) -> str:
    """The jitter's key of one try of one task instance."""
    return f"{dag_id}#{task_id}#{ti_id}#{try_number}"
