"""Dag files for the Dag processor's tests: good ones, and every way one can go wrong."""

from __future__ import annotations

from pathlib import Path


def good(dag_id: str, tasks: int = 1, extra: str = "") -> str:
    names = ", ".join(f'"t{n}"' for n in range(tasks))
    return f"""
from spawnflow import CommandTask, Dag
{extra}
with Dag("{dag_id}", tags=["test"]):
    for name in [{names}]:
        CommandTask(name, "exit 0")
"""


HANG = "import time\ntime.sleep(600)\n"
# faulthandler off: pytest turns it on, a fork parser inherits it, and its dump is noise.
SEGFAULT = "import ctypes, faulthandler\nfaulthandler.disable()\nctypes.string_at(0)\n"
OS_EXIT = "import os\nos._exit(7)\n"
SYS_EXIT = "import sys\nsys.exit(3)\n"
KILLED = "import psutil\npsutil.Process().kill()\n"
SYNTAX_ERROR = "from spawnflow import Dag\ndef broken(:\n    pass\n"
MISSING_MODULE = "import no_such_module_for_spawnflow\n"
THREAD_AT_IMPORT = good(
    "threaded",
    extra="import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()",
)
FORK_AT_IMPORT = good("forked", extra="import os\nos.fork()  # both copies go on importing")
COUNTS_IMPORTS = """
import os
from spawnflow import CommandTask, Dag
with open(os.environ.get("COUNTER", "") or __file__ + ".count", "a") as counter:
    counter.write("imported\\n")
with Dag("{dag_id}"):
    CommandTask("t", "exit 0")
"""
REPORTS_SQLALCHEMY = """
import sys
from spawnflow import CommandTask, Dag
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "sqlalchemy")
with Dag("modules", description=",".join(loaded) or "none"):
    CommandTask("t", "exit 0")
"""


def connects_to(url: str) -> str:
    """A Dag file that opens (and keeps) a database connection at import."""
    return good(
        "connected",
        extra=(
            "import sqlalchemy\n"
            f"engine = sqlalchemy.create_engine({url!r})\n"
            "connection = engine.connect()\n"
            "connection.execute(sqlalchemy.text('SELECT 1'))"
        ),
    )


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


HELPER_NAMED_LIKE_STDLIB = (
    "raise RuntimeError('a Dags-folder helper shadowed the standard library')\n"
)

HELPER_MODULE_WITH_DAG = good("helper_dag")

IMPORTS_HELPER = """
import z_helper  # builds its own Dag, which stays the helper's
from spawnflow import CommandTask, Dag
with Dag("importer"):
    CommandTask("t", "exit 0")
"""

SLOW_HANDLER = """
import logging
from spawnflow import CommandTask, Dag

class Slow(logging.Handler):
    def emit(self, record):
        pass
    def close(self):
        open(__file__ + ".closed", "w").close()  # the parser must not call this

logging.getLogger().addHandler(Slow())
with Dag("handler"):
    CommandTask("t", "exit 0")
"""

LEAVES_A_DAEMON = """
import subprocess
from spawnflow import CommandTask, Dag
import sys
# A session of its own on POSIX (no group kill reaches it); Windows ignores the flag.
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                          start_new_session=True)
open(__file__ + ".pid", "w").write(str(daemon.pid))
with Dag("daemon"):
    CommandTask("t", "exit 0")
"""

UNSTABLE_REPRS = """
from spawnflow import Dag, task

class Thing:
    pass

with Dag("reprs"):
    @task
    def use(things, names):
        return None

    use(Thing(), {"alpha", "beta", "gamma", "delta"})
"""

# One task's value reaches the next (dags check, tasks test --xcom).
PASSES_A_VALUE = """
from spawnflow import Dag, task


@task
def produce():
    return {"rows": 5}


@task
def consume(value):
    if value != {"rows": 5}:
        raise ValueError(f"got {value!r}")


with Dag("passes_a_value"):
    consume(produce())
"""
