"""What Antler adds to LangGraph Server's HTTP API (`antler.server:app`).

`langgraph.json` names it (`"http": {"app": "antler.server:app"}`); the server
puts its middleware in front of every route, before any auth handler runs.
`served_app` assembles it from the parts in `antler.runtime.served`, outermost
first:

* `RunInputCheck` (`served.inputcheck`): a request that would start a run or
  write a thread's state with input a caller may not send gets 400 with the
  reason (413 for a body over ``$ANTLER_MAX_REQUEST_BYTES``) before anything
  is queued.
* `StatedIdentityCheck` (`served.takeover`), with ``trust_client_identity``: a
  run stating an identity whose directory of the thread no run of it made gets
  409 before it starts.
* `DeletedThreadFiles` (`served.removal`): a thread the server deletes loses
  its files and sandbox namespaces before the answer goes out.
* `HiddenThreadConflicts` (`served.hiddenthreads`): another user's thread id
  answers as a missing thread, not a taken one.

And, while the app serves, `GoneThreadSweep` (`served.sweep`): a thread the
server removed without a request (its TTL sweep, rows deleted in its database)
loses its files at the next sweep (every ``$ANTLER_SERVED_SWEEP_SECONDS``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from antler.plugin_api.paths import PathLayout

from .served.hiddenthreads import HiddenThreadConflicts
from .served.inputcheck import (
    MAX_REQUEST_BYTES_ENV,
    RunInputCheck,
    check_run_request,
    max_request_bytes,
    thread_write,
)
from .served.removal import DeletedThreadFiles
from .served.sweep import SWEEP_SECONDS_ENV, GoneThreadSweep
from .served.takeover import StatedIdentityCheck

__all__ = ["MAX_REQUEST_BYTES_ENV", "SWEEP_SECONDS_ENV", "DeletedThreadFiles",
           "GoneThreadSweep", "HiddenThreadConflicts", "RunInputCheck", "StatedIdentityCheck",
           "check_run_request", "served_app", "thread_write"]


def served_app(allow_roles: Collection[str], paths: PathLayout | None = None, *,
               trust_client_identity: bool = False) -> Any:
    """The Starlette app `langgraph.json` names: no routes, the middlewares
    (`RunInputCheck`; `StatedIdentityCheck` with `trust_client_identity`;
    `DeletedThreadFiles` when `paths`, the agent's, says where thread files are) and,
    with `paths`, the sweep for threads the server removed on its own (`GoneThreadSweep`).

    Raises:
        ConfigError: $ANTLER_MAX_REQUEST_BYTES or $ANTLER_SERVED_SWEEP_SECONDS is not a
            positive number.
    """
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    middleware = [Middleware(RunInputCheck, allow_roles=allow_roles,
                             max_bytes=max_request_bytes())]
    if paths is not None and trust_client_identity:
        middleware.append(Middleware(StatedIdentityCheck, paths=paths))
    if paths is not None:
        middleware.append(Middleware(DeletedThreadFiles, paths=paths))
    middleware.append(Middleware(HiddenThreadConflicts))
    sweep = GoneThreadSweep(paths) if paths is not None else None
    return Starlette(middleware=middleware,
                     lifespan=sweep.lifespan() if sweep is not None else None)
