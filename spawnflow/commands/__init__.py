"""The ``spawnflow`` command line: thin click commands over services and processors.

Settings are resolved lazily, on the first command that needs them, so that
``--help`` works even with a broken config file. Errors the user can fix
(:class:`~spawnflow.bootstrap.errors.UserError`) become one line on stderr and a
non-zero exit, never a traceback.
"""

from __future__ import annotations

import sys

import click

from spawnflow import __version__
from spawnflow.bootstrap import settings_table
from spawnflow.bootstrap.errors import UserError
from spawnflow.commands.groups import Group
from spawnflow.commands.state import State


class SpawnflowGroup(Group):
    """The top-level group: turns a UserError from any command into a one-line
    ClickException (and, as every group, answers an unknown command with a hint)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as error:
            raise click.ClickException(_sentence(str(error))) from None
        except KeyboardInterrupt:
            # Ctrl-C in a command that does not take stop requests itself (the
            # long-running ones do, before they wait for the database): the code
            # shells expect, not click's 1.
            click.echo("Aborted!", err=True)
            raise click.exceptions.Exit(130) from None
        except Exception as error:
            # A database that refuses (read-only, out of reach): one sentence, no traceback.
            sqlalchemy = sys.modules.get("sqlalchemy")
            if sqlalchemy is not None and isinstance(error, sqlalchemy.exc.SQLAlchemyError):
                from spawnflow.bootstrap import outage

                raise click.ClickException(_sentence(outage.explain(error))) from None
            raise


def _sentence(text: str) -> str:
    message = text.strip()
    if not message.endswith((".", "?", "!")):
        message += "."
    return message[:1].upper() + message[1:]


def _setting_flags(function):
    """One ``--flag`` per setting that the table gives a flag (defined once, here)."""
    for option in reversed(settings_table.OPTIONS):
        if option.flag:
            function = click.option(
                option.flag,
                f"setting__{option.section}__{option.key}",
                metavar="VALUE",
                help=f"{option.help} Sets [{option.section}] {option.key}.",
            )(function)
    return function


@click.group(cls=SpawnflowGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="spawnflow")
@_setting_flags
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Set any setting for this run (repeatable); beats the environment and config file.",
)
@click.option("-v", "--verbose", is_flag=True, help="Show informational log lines on stderr.")
@click.pass_context
def cli(ctx: click.Context, assignments: tuple[str, ...], verbose: bool, **flags: str | None):
    """spawnflow: workflows whose processes behave the same under fork, forkserver and spawn.

    Settings come from defaults, the config file, SPAWNFLOW__SECTION__KEY environment
    variables and these options, in that order; see `spawnflow config show --sources`.
    """
    from spawnflow.bootstrap import logs

    logs.configure("cli", console=True, console_level="INFO" if verbose else "WARNING")
    ctx.obj = State.from_cli(assignments, flags, verbose=verbose)


def _register() -> None:
    from spawnflow.commands import (
        assets,
        backfill,
        backfills,
        celery,
        completion,
        config,
        connections,
        dag_processor,
        dag_runs,
        dags,
        db,
        doctor,
        info,
        pools,
        runs,
        scheduler,
        status,
        tasks,
        triggerer,
        variables,
        xcom,
    )

    cli.add_command(info.info_command)
    cli.add_command(config.config_group)
    cli.add_command(db.db_group)
    cli.add_command(doctor.doctor_command)
    cli.add_command(dag_processor.dag_processor_command)
    cli.add_command(dags.dags_group)
    # A Dag's runs under Airflow's names (dags list-runs, state, next-execution).
    for command in (dag_runs.list_runs_command, dag_runs.state_command,
                    dag_runs.next_execution_command):  # fmt: skip
        dags.dags_group.add_command(command)
    dags.dags_group.add_command(backfill.backfill_command)
    cli.add_command(backfills.backfills_group)
    cli.add_command(scheduler.scheduler_command)
    cli.add_command(scheduler.standalone_command)
    cli.add_command(status.status_command)
    cli.add_command(runs.runs_group)
    cli.add_command(tasks.tasks_group)
    cli.add_command(variables.variables_group)
    cli.add_command(pools.pools_group)
    cli.add_command(connections.connections_group)
    cli.add_command(xcom.xcom_group)
    cli.add_command(assets.assets_group)
    cli.add_command(triggerer.triggerer_command)
    cli.add_command(triggerer.triggers_group)
    cli.add_command(celery.celery_group)
    cli.add_command(completion.completion_command)


_register()
