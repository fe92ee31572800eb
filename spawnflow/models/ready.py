"""Every model loaded and its mapper configured: what a forkserver preloads for the
processes that hold an engine, so that they share that work's memory instead of each
doing it on its first query."""

from sqlalchemy.orm import configure_mappers

from spawnflow import models

models.Base  # noqa: B018 - the first name taken loads every model
configure_mappers()
