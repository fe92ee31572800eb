"""``spawnflow doctor``."""

from __future__ import annotations

import click

from spawnflow.commands.output import table
from spawnflow.commands.state import State, pass_state


@click.command("doctor", short_help="Check the process model under every start method.")
@click.option(
    "--method", "methods", multiple=True, metavar="METHOD",
    help="Check only this start method (repeatable). Default: every method this machine has.",
)  # fmt: skip
@click.option("--grace", default=5.0, show_default=True, help="Seconds for each warm stop.")
@pass_state
def doctor_command(state: State, methods: tuple[str, ...], grace: float) -> None:
    """Launch probe children under each start method and check that each child got the
    parent's settings, configured its logging, used no inherited database connection,
    left the parent's pool untouched, and stopped with its whole tree."""
    from spawnflow.bootstrap import startmethods
    from spawnflow.services import doctor

    settings = state.settings()
    for method in methods:
        startmethods.check(method)
    reports = doctor.run(settings, list(methods) or None, grace=grace)
    headers = ["check", *(r.method for r in reports)]
    rows = [["child ready", *(_ms(r.ready_ms) for r in reports)]]
    for name in doctor.CHECKS:
        rows.append([name, *(_mark(r.check(name)) for r in reports)])
    click.echo(table(headers, rows))
    failures = [(r.method, c) for r in reports for c in r.checks if not c.ok]
    for method, check in failures:
        click.echo(f"{method}: {check.name}: {check.detail}", err=True)
    if failures:
        raise click.exceptions.Exit(1)
    click.echo("All checks passed.")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _mark(check) -> str:
    if check is None:
        return "-"
    return "ok" if check.ok else "FAIL"
