"""The parts of Antler's served app (`antler.runtime.serverapp` assembles them).

* `routes`: the server's paths that write a thread, delete one or start a run.
* `exchange`: reading a request's body, asking the server as the caller, answering.
* `inputcheck`: `RunInputCheck`, input a caller may not send refused before a run.
* `takeover`: `StatedIdentityCheck`, a stated identity's takeover refused with 409.
* `hiddenthreads`: `HiddenThreadConflicts`, another user's thread id is a missing thread.
* `removal`: `DeletedThreadFiles`, a deleted thread loses its files.
* `sweep`: `GoneThreadSweep`, a thread the server dropped on its own loses its files.
"""
