"""What a child of each role has imported when its target starts (issue 14's cheap
children): never dill or multiprocess (the standard library starts children), never
Alembic or click (the CLI's), no SQLAlchemy in the roles that run user code, and no
structlog in the short-lived ones (a file parser, a task, an XCom helper) before they
log.

Under spawn and forkserver the child's modules are its own (a new interpreter; the
forkserver's preload). A fork child holds a copy of its parent's modules, so there
only what the role's import adds is checked.
"""

from __future__ import annotations

import pytest

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
#: One per file, task or XCom call: they pay for logging only once they log.
SHORT_LIVED = {"file-parser", "task", "xcom-helper"}
NEVER = {"dill", "multiprocess", "alembic", "click"}
NO_DATABASE = {"sqlalchemy"}


def top_level(modules: list[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_child_imports_only_what_its_role_needs(role, start_method, make_settings):
    make_settings()
    spec = ChildSpec(role, "tests.fixtures.targets:report_modules", {"target": ROLES[role]})
    with launch(spec, method=start_method) as child:
        child.wait_ready()
        message = child.channel.recv(timeout=120)
        assert isinstance(message, Report)
        report = message.values
        assert child.join(timeout=60).exitcode == 0
    own = set(report["modules"])
    if start_method == "fork":
        own -= set(report["before"])
    forbidden = NEVER | (NO_DATABASE if role in USER_CODE_ROLES else set())
    forbidden |= {"structlog"} if role in SHORT_LIVED else set()
    assert top_level(sorted(own)) & forbidden == set()
    if role in USER_CODE_ROLES:
        assert not any(name.startswith("spawnflow.models") for name in own)
