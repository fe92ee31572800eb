"""The example Dags run on every OS: their commands use only what sh and cmd share."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

from spawnflow.sdk import building, dags, mapping
from spawnflow.sdk.tasks import CommandTask

EXAMPLES = Path(dags.__file__).parents[1] / "example_dags"
#: Characters that mean something different, or nothing, in one of sh and cmd.
SHELL_SPECIFIC = re.compile(r"""['"$%&|<>^;`*?~\\]""")
PYTHON = f'"{sys.executable}"'


def portable(command: str) -> bool:
    """``echo`` of plain words, or the quoted interpreter running quote-free code."""
    if command.startswith("echo "):
        return not SHELL_SPECIFIC.search(command[len("echo ") :])
    prefix = f'{PYTHON} -c "'
    if command.startswith(prefix) and command.endswith('"'):
        code = command[len(prefix) : -1]
        return not re.search(r'["$%]', code)
    return False


def commands_of(path: Path) -> list[str]:
    building.forget_built_dags()
    runpy.run_path(str(path))
    found = []
    for dag in building.built_dags():
        for task in dag.task_dict.values():
            if isinstance(task, CommandTask):
                command = task.command
                if isinstance(command, str):
                    found.append(command)
                elif task.expand_input is not None:  # mapped: each literal element's
                    expanded = task.expand_input.to_json(convert=lambda value: value)
                    found += [command(**kwargs) for kwargs in mapping.elements(expanded, {})]
                else:  # a @task.command builds its command from upstream values: try one
                    found.append(command("3"))
    return found


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("example_*.py")), ids=lambda p: p.stem)
def test_example_commands_mean_the_same_in_sh_and_cmd(path):
    for command in commands_of(path):
        assert portable(command), command


def test_a_posix_only_command_is_not_taken_for_a_portable_one():
    for command in ("date -u", "ls -1 /tmp | wc -l", "true", "echo 'quoted'", "echo $HOME"):
        assert not portable(command), command
