"""The one click group class of every ``spawnflow`` group: unknown commands get a hint.

click 8.4 and later suggest a close command name themselves, older versions do not
(pyproject allows click 8.1); spawnflow words the hint itself, so every group, at
every click version, answers a typo the same way, and an Airflow user's spelling of a
command that spawnflow names differently points at spawnflow's command.
"""

from __future__ import annotations

import click

#: Airflow's names of commands that spawnflow spells differently, by their path under
#: ``spawnflow`` (Airflow's ``dags list-runs``, ``dags state``, ``dags next-execution``
#: and ``tasks list`` are spawnflow commands too, under the same names).
AIRFLOW_SPELLINGS = {
    "db init": "db migrate",
    "db upgrade": "db migrate",
    "db check-migrations": "db check",
    "config get-value": "config get",
    "config list": "config show",
    "dags reserialize": "dag-processor --once",
    "tasks states-for-dag-run": "tasks states",
    "tasks state": "tasks states",
    "version": "--version",
}


class Group(click.Group):
    """A click group whose unknown command is a usage error (exit 2) with a hint: the
    closest command name (difflib), or spawnflow's name for Airflow's spelling."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = click.utils.make_str(args[0])
        if (
            self.get_command(ctx, name) is None
            and not ctx.resilient_parsing  # shell completion: offer, never fail
            and not name.startswith("-")  # an option: click parses it (--help, or its error)
        ):
            raise click.UsageError(
                f"No such command {name!r}.{unknown_command_hint(ctx, self, name)}", ctx
            )
        return super().resolve_command(ctx, args)


def unknown_command_hint(ctx: click.Context, group: click.Group, name: str) -> str:
    """`` Did you mean ...?`` for ``name`` in ``group``, or ``""``."""
    import difflib  # only on the way to an error

    names = [name]
    while ctx.parent is not None:  # the group's path under spawnflow, without the root's name
        names.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    path = " ".join(names)
    if path in AIRFLOW_SPELLINGS:
        return f" Did you mean `spawnflow {AIRFLOW_SPELLINGS[path]}` (Airflow's `{path}`)?"
    visible = [known for known, command in group.commands.items() if not command.hidden]
    close = difflib.get_close_matches(name, visible, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""
