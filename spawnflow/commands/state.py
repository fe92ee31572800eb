"""What the group hands its commands: the command-line overrides and, on demand, settings."""

from __future__ import annotations

from collections.abc import Mapping

import click

from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap import settings_table
from spawnflow.bootstrap.settings import Override, Settings


class State:
    """Per-invocation state: overrides from the command line, settings resolved once."""

    def __init__(self, overrides: list[Override], verbose: bool = False):
        self.overrides = overrides
        self.verbose = verbose
        self._settings: Settings | None = None

    @classmethod
    def from_cli(
        cls, assignments: tuple[str, ...], flags: Mapping[str, str | None], verbose: bool = False
    ) -> State:
        overrides = []
        for option in settings_table.OPTIONS:
            value = flags.get(f"setting__{option.section}__{option.key}")
            if value is not None:
                overrides.append(Override(option.name, value, option.flag or option.name))
        for assignment in assignments:
            name, equals, value = assignment.partition("=")
            if not equals or "." not in name:
                raise click.BadParameter(
                    f"{assignment!r} is not SECTION.KEY=VALUE", param_hint="--set"
                )
            name = name.strip()
            twice = next((o for o in overrides if o.name == name), None)
            if twice is not None:
                raise click.UsageError(
                    f"{name} is set twice on the command line ({twice.option} and --set {name})."
                )
            overrides.append(Override(name, value, f"--set {name}"))
        return cls(overrides, verbose)

    def settings(self) -> Settings:
        """Resolve (once) and install the settings snapshot of this CLI process."""
        if self._settings is None:
            self._settings = settings_module.resolve(overrides=self.overrides)
            settings_module.install(self._settings)
        return self._settings

    def database(self) -> Settings:
        """The settings, once the database is known to be reachable and migrated.

        For commands that read or write spawnflow's tables: a database that was never
        migrated is one sentence telling the user what to run, not a missing table.
        """
        from spawnflow.models import schema

        snapshot = self.settings()
        schema.require_current()
        return snapshot

    def ready_to_work(self) -> Settings:
        """The settings, once a command that runs for long (scheduler, dag-processor,
        dags test) has what it needs, checked before any child starts: a logs folder
        and a database it can write, and the database reachable (a server restarting
        meanwhile is waited for, up to ``[database] outage_tolerance``) and migrated.
        """
        from spawnflow.bootstrap import orm
        from spawnflow.models import schema

        snapshot = self.settings()
        require_writable_logs(snapshot)
        wait_for_database()
        orm.require_writable()
        schema.require_current()
        return snapshot


def require_writable_logs(snapshot: Settings) -> None:
    """One sentence, before any child starts, if the logs folder cannot be written."""
    from spawnflow.bootstrap import paths

    paths.require_writable_folder(
        snapshot.logging.base_log_folder, "logs folder", "[logging] base_log_folder"
    )


def default_dags_folder_made(snapshot: Settings) -> bool:
    """Make the Dags folder if it is the default one and missing, as the first
    ``standalone`` or ``dag-processor`` does (a user's ``cp dag.py`` into the folder
    ``spawnflow info`` names must work); whether it was made now. A configured folder
    that is missing is left to the Dag processor's warning: making it would hide a typo.
    """
    from spawnflow.bootstrap import paths

    folder = snapshot.core.dags_folder
    if snapshot.source("core", "dags_folder").layer != "default" or folder.is_dir():
        return False
    paths.require_writable_folder(folder, "Dags folder", "[core] dags_folder")
    return True


def wait_for_database(*, create: bool = False) -> None:
    """Connect once, riding out an outage of up to ``[database] outage_tolerance``; a
    stop request (see :func:`take_stop_requests`) ends the wait, exit code 130 or 143."""
    from spawnflow.bootstrap import lifecycle, orm, outage

    try:
        outage.ride_out(lambda: orm.ping(create=create), what="connecting at start-up",
                        give_up=lifecycle.stop_requested.is_set)  # fmt: skip
    except (outage.GaveUp, lifecycle.WarmStop):  # one stop request, or two at once
        click.echo("Stopped while waiting for the database.", err=True)
        raise click.exceptions.Exit(lifecycle.signal_exit_code() or 130) from None


def take_stop_requests() -> None:
    """From here on Ctrl-C and SIGTERM ask this command to stop (warm; a second one:
    at once), whatever the shell that started it did with SIGINT (a shell without job
    control starts a background command with SIGINT ignored, and Python then installs
    no KeyboardInterrupt of its own)."""
    from spawnflow.bootstrap import lifecycle

    lifecycle.install()
    lifecycle.defer_warm_stop()


pass_state = click.make_pass_decorator(State)
