"""What a child of each role has imported when its target starts (issue 14's cheap
children): never dill or multiprocess (the standard library starts children), never
Alembic or click (the CLI's), no SQLAlchemy in the roles that run user code, and no
structlog in the short-lived ones (a file parser, a task, an XCom helper), even once
they have written to their log file (structlog renders the console only).

Under spawn the child's modules are its own (a new interpreter). A forkserver child
shares what its server preloaded (every child of the server has it, loaded once), and
a fork child holds a copy of its parent's modules: there only what the child adds is
its own. Outside fork no user-code role holds SQLAlchemy, shared or not.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

from spawnflow.bootstrap import forkservers
from spawnflow.bootstrap.launcher import ChildSpec, launch
from spawnflow.executors.local import TARGET as WORKER_TARGET
from spawnflow.processors.dag_processor.parsing import PARSER_TARGET
from spawnflow.processors.triggerer.job import RUNNER_TARGET
from spawnflow.processors.worker.supervisor import TARGET as TASK_TARGET
from spawnflow.services.standalone import COMPONENTS
from spawnflow.xcoms import HELPER_TARGET
from tests.fixtures.messages import Report

pytestmark = pytest.mark.process

#: Roles whose processes run user code: no database there (law 3).
USER_CODE_ROLES = {
    "file-parser": PARSER_TARGET,
    "task": TASK_TARGET,
    "xcom-helper": HELPER_TARGET,
    "trigger-runner": RUNNER_TARGET,
}
ROLES = {**USER_CODE_ROLES, "executor-worker": WORKER_TARGET, **COMPONENTS}
#: One per file, task or XCom call: their log lines go to a file, without structlog.
SHORT_LIVED = {"file-parser", "task", "xcom-helper"}
NEVER = {"dill", "multiprocess", "alembic", "click"}
NO_DATABASE = {"sqlalchemy"}


def top_level(modules: list[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_child_imports_only_what_its_role_needs(role, start_method, make_settings, tmp_path):
    make_settings()
    log_file = tmp_path / f"{role}.log"
    kwargs = {"target": ROLES[role], "log": role in SHORT_LIVED}
    spec = ChildSpec(role, "tests.fixtures.targets:report_modules", kwargs, log_file=log_file)
    with launch(spec, method=start_method) as child:
        child.wait_ready()
        message = child.channel.recv(timeout=120)
        assert isinstance(message, Report)
        report = message.values
        assert child.join(timeout=60).exitcode == 0
    held = set(report["modules"])
    own = held
    if start_method == "fork":
        own = held - set(report["before"])
    elif start_method == "forkserver":
        # What its server preloaded is shared by every child of the server, paid once;
        # the child has it from its first instruction.
        shared = preloaded(forkservers.kind_of(role))
        assert shared <= set(report["before"])
        own = held - shared
    forbidden = NEVER | (NO_DATABASE if role in USER_CODE_ROLES else set())
    # Nor psutil: stopping the children it does not have costs an exiting child nothing.
    forbidden |= {"structlog", "psutil"} if role in SHORT_LIVED else set()
    assert top_level(sorted(own)) & forbidden == set()
    if role in USER_CODE_ROLES:
        # Not even shared from a forkserver's preload (a fork child holds its parent's).
        kept = own if start_method == "fork" else held
        assert top_level(sorted(kept)) & NO_DATABASE == set()
        assert not any(name.startswith("spawnflow.models") for name in kept)
    if role in SHORT_LIVED:
        # It did log: the event with its fields and the record, as JSON lines.
        lines = [json.loads(line) for line in log_file.read_text().splitlines()]
        assert [(line["event"], line["role"]) for line in lines] == [
            ("task started", role), ("a task's own record", role)]  # fmt: skip
        assert lines[0]["task_id"] == "report"


@functools.cache
def preloaded(kind: str) -> frozenset[str]:
    """The modules a fresh interpreter holds once it imported a server's preload."""
    code = (
        "import sys\nfrom spawnflow.bootstrap.forkservers import PRELOAD\n"
        f"for name in PRELOAD[{kind!r}]: __import__(name)\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return frozenset(done.stdout.split())
