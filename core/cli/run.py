"""`antler run` and `antler demo`: running a real agent through the plugin chain.

Kept apart from the read-only chain/config commands because these import
LangChain and build graphs; `antler chain show` stays fast.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from . import CliError
from .session import Session, manifest_option, pass_session


def agent_options(command: Any) -> Any:
    """The options `antler run` and `antler resume` share: which agent runs, and how."""
    options = [
        click.option("--wait", is_flag=True,
                     help="When another run is working on the thread, wait for it instead of "
                          "failing."),
        click.option("--user", "user_id", default="default", show_default=True,
                     help="User id."),
        click.option("--model", "model_spec", default=None,
                     help="A name under `models.named`, an init_chat_model string "
                          "('openai:gpt-4o'), 'scripted:FILE.yaml', ..."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     default=None, help="Operator config YAML."),
        click.option("--plan", is_flag=True, help="Plan mode (the todo list joins the chain)."),
        click.option("--vision", is_flag=True, default=None,
                     help="The model supports images."),
        click.option("--subagents", is_flag=True, help="Let the agent delegate with `task`."),
        click.option("--home", type=click.Path(file_okay=False), default=None,
                     help="Base directory for threads and checkpoints (default: $ANTLER_HOME "
                          "or ./.antler)."),
        click.option("--trace", is_flag=True, help="Print the timeline of hook invocations."),
        click.option("--fuse/--no-fuse", default=None,
                     help="Fuse consecutive node hooks into one graph node (default: the "
                          "config's chain.fuse, which defaults to on)."),
        click.option("--record", "record_path", type=click.Path(dir_okay=False),
                     default=None,
                     help="Record the conversation to this file (secrets redacted); a later "
                          "run of the same thread with the same file continues it. Replay "
                          "it with `antler replay FILE`."),
        manifest_option,
    ]
    for option in reversed(options):
        command = option(command)
    return command


PAUSED_EXIT_CODE = 3
"""`antler run`/`resume` exit code when the run waits for a person's decision."""


@click.command("run")
@click.argument("prompt", required=False)
@click.option("--prompt-file", "-f", "prompt_file", type=click.Path(dir_okay=False),
              default=None, help="Read the prompt from this file ('-': standard input).")
@click.option("--thread", "thread_id", default=None, help="Thread id (default: a new one).")
@click.option("--upload", "uploads", multiple=True, type=click.Path(dir_okay=False),
              help="A file to upload with the prompt (repeatable).")
@agent_options
@pass_session
def run_command(session: Session, prompt: str | None, prompt_file: str | None,
                thread_id: str | None, uploads: tuple[str, ...], **options: Any) -> None:
    """Run PROMPT through the lead chain and stream the answer.

    PROMPT '-' (or --prompt-file -) reads the prompt from standard input;
    --prompt-file reads it from a file, for prompts of any length. A thread
    belongs to the user who created it; one run at a time works on it.
    Ctrl-C (or SIGTERM) stops the running command at once and keeps what the
    thread saved, so the same --thread continues it. An optional plugin that
    cannot be ordered or whose factory does not import is left out with a
    warning on stderr naming it and its distribution; the run goes on with the
    rest of the chain.

    A run that stops for a person's approval (a human-in-the-loop plugin) says
    so, shows the pending actions and exits with code 3; `antler resume
    THREAD --approve | --reject | --edit JSON` continues it.
    """
    import uuid

    from antler.plugin_api.paths import validate_id

    text = _read_prompt(prompt, prompt_file)
    if thread_id is not None:  # '' is refused, not taken for "a new thread"
        validate_id("thread id", thread_id)
    thread_id = thread_id if thread_id is not None else f"thread-{uuid.uuid4().hex[:12]}"
    _execute(session, thread_id, text, uploads=uploads, **options)


@click.command("resume")
@click.argument("thread_id", metavar="THREAD")
@click.option("--approve", "decision", flag_value="approve",
              help="Run the pending action(s) as they are.")
@click.option("--reject", "decision", flag_value="reject",
              help="Do not run them; the model is told (add --message to say why).")
@click.option("--edit", "edited", metavar="JSON", default=None,
              help="Run the pending action with these arguments instead (a JSON object; with "
                   "several actions, a JSON list of objects, one per action).")
@click.option("--message", default=None, help="Why, with --reject.")
@agent_options
@pass_session
def resume_command(session: Session, thread_id: str, decision: str | None,
                   edited: str | None, message: str | None, **options: Any) -> None:
    """Continue THREAD, whose run waits for a decision, with that decision.

    Give the same --config, --model and flags as the run that paused. The
    decision applies to every pending action (--edit needs one set of
    arguments per action). Exits 0 when the run finishes, 3 if it pauses again.
    """
    from antler.plugin_api.paths import validate_id

    validate_id("thread id", thread_id)
    if (decision is None) == (edited is None):
        raise click.UsageError("choose one of --approve, --reject or --edit JSON")
    if message is not None and decision != "reject":
        raise click.UsageError("--message goes with --reject")
    _execute(session, thread_id, None,
             decision=_Decision(decision or "edit", message, _edited_args(edited)), **options)


def _edited_args(edited: str | None) -> list[dict[str, Any]] | None:
    from antler import jsonsource

    if edited is None:
        return None
    try:
        value = jsonsource.loads(edited)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}",
                                 param_hint="--edit") from None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, dict) for item in items):
        raise click.BadParameter("expects a JSON object of arguments (or a list of them)",
                                 param_hint="--edit")
    return items


class _Decision:
    """What `antler resume` answers every pending action with."""

    def __init__(self, kind: str, message: str | None, edits: list[dict[str, Any]] | None):
        self.kind, self.message, self.edits = kind, message, edits

    def echo(self, pending: list[Any]) -> None:
        """Say what is decided, with the arguments that will run (the edited ones)."""
        from antler.runtime.approvals import pending_actions

        for index, action in enumerate(pending_actions(pending)):
            if self.kind == "edit" and self.edits:
                click.echo(f"[edited] {action['name']}({_short(self.edits[index])})", err=True)
            else:
                why = f": {self.message}" if self.message else ""
                past = {"approve": "approved", "reject": "rejected"}.get(self.kind, self.kind)
                click.echo(f"[{past}] {action['name']}({_short(action.get('args'))}){why}",
                           err=True)

    def answer(self, pending: list[Any]) -> Any:
        """The `Command(resume=...)` value for the thread's pending interrupts."""
        from antler.runtime.approvals import resume_value

        return resume_value(pending, self.kind, message=self.message, edits=self.edits)


def _execute(session: Session, thread_id: str, text: str | None, *, uploads: tuple[str, ...] = (),
             decision: _Decision | None = None, wait: bool, user_id: str,
             model_spec: str | None, config_path: str | None, plan: bool, vision: bool | None,
             subagents: bool, home: str | None, trace: bool, fuse: bool | None,
             record_path: str | None = None) -> None:
    """Build the agent, run a prompt (or resume with a decision), stream, report."""
    import uuid

    from antler.chain.conditions import runtime_for
    from antler.chain.modelrefs import model_reference_problems
    from antler.plugin_api.context import MODEL_CATALOG
    from antler.plugin_api.paths import validate_id
    from antler.plugin_api.uploads import stage_upload
    from antler.runtime.agent import create_agent
    from antler.runtime.approvals import pending_approvals
    from antler.runtime.models import ModelCatalog
    from antler.runtime.threadrecord import load_record, restore_script_position
    from antler.runtime.tracing import Tracer

    from .chain import print_plan_warnings
    from .output import warn

    validate_id("user id", user_id)
    registry = session.registry()
    config = session.config(config_path)
    spec = model_spec or config.models.default
    if spec == "scripted":
        raise click.UsageError(
            "the scripted model needs a script: pass --model scripted:FILE.yaml (a list of "
            "assistant turns) or a real provider such as --model openai:gpt-4o"
        )
    unknown_models = model_reference_problems(config)
    if unknown_models:  # would fail mid-run in a LangChain error that names no key
        raise CliError("\n".join(unknown_models))
    catalog = ModelCatalog(config.models.named)
    for reference in (spec, config.models.subagent, config.models.title, config.models.memory):
        catalog.check(reference)  # a missing package or key fails here, before the run
    model = catalog.resolve(spec)
    runtime = runtime_for(config, {"plan_mode": plan, "subagents_enabled": subagents,
                                   "user_id": user_id, "supports_vision": bool(vision)},
                          model=spec, catalog=catalog)
    tracer = Tracer() if trace else None
    run_id = uuid.uuid4().hex
    outcome = _Outcome()
    base = home or config.storage.base_dir
    checkpointer = config.storage.checkpointer
    try:
        with create_agent(config, model=model, runtime=runtime, registry=registry, base_dir=base,
                          services={MODEL_CATALOG: catalog},
                          checkpointer=None if checkpointer == "none" else checkpointer,
                          tracer=tracer, fuse=fuse, record=record_path) as agent:
            print_plan_warnings(agent.chain.plan)
            for name, exclusion in agent.chain.plan.excluded.items():
                if exclusion.kind == "load_failed" and not any(
                        name in problem.plugins for problem in agent.chain.plan.problems):
                    warn(f"{name!r} [{exclusion.spec.provenance}] is left out of the "
                         f"{agent.chain.plan.chain} chain: {exclusion.reason}")
            click.echo(f"thread: {thread_id}", err=True)
            with _stops_commands(agent, thread_id):
                if agent.storage is not None:
                    agent.storage.check_owner(thread_id, user_id)  # before staging any upload
                thread_dir = agent.services.get("paths").thread(user_id, thread_id) \
                    .user_data.parent
                record = load_record(thread_dir)
                restore_script_position(model, record)
                if decision is not None:
                    pending = pending_approvals(agent, thread_id)
                    if not pending:
                        raise click.UsageError(_not_waiting(agent, thread_id, record, {
                            "config": config_path, "model": spec}))
                    message: Any = decision.answer(pending)
                    decision.echo(pending)
                    files: list[Any] = []
                else:
                    paths = agent.services.get("paths").thread(user_id, thread_id)
                    files = [stage_upload(paths, upload) for upload in uploads]
                    message = text
                streamed: set[str] = set()
                shown: dict[Any, str] = _already_shown(agent, thread_id) \
                    if decision is not None else {}
                waiting_since = _announce_wait(agent, thread_id) if wait else None
                try:
                    with _SavedResults.of(agent) as saved:
                        for mode, payload in agent.stream(message, thread_id=thread_id,
                                                          user_id=user_id, files=files,
                                                          wait=wait,
                                                          on_interrupted=_echo_interrupted,
                                                          stream_mode=["messages", "updates"],
                                                          run_id=run_id):
                            if waiting_since is not None:
                                click.echo(f"[waited {time.monotonic() - waiting_since:.1f} s] "
                                           "the other run finished; this one starts", err=True)
                                waiting_since = None
                            if mode == "messages":
                                chunk, metadata = payload
                                _echo_tokens(chunk, metadata, streamed)
                            else:
                                _echo_update(payload, streamed, shown, saved)
                                outcome.collect(payload)
                except Exception:
                    if any(message_id not in shown for message_id in streamed):
                        click.echo()  # end the streamed line before the error's line
                    raise
                finally:  # the script's position and the flags stay with the thread
                    _remember(thread_dir, model, config_path, spec)
            waiting = pending_approvals(agent, thread_id) if agent.checkpointer else []
            state = agent.state(thread_id) if agent.checkpointer else {}
            if waiting:
                _echo_waiting(thread_id, waiting)
            elif state.get("title"):
                click.echo(f"[title] {state['title']}", err=True)
            failed = False if waiting else outcome.report(
                state, run_id, usage="token_usage" in agent.chain.names)
            queue = agent.services.items.get("memory_queue")
            if queue is not None:
                queue.flush()
            if agent.recorder is not None:
                for problem in agent.recorder.problems:
                    click.echo(f"[record] {problem}", err=True)
                click.echo(f"[recorded] {agent.recorder.path_for(thread_id)}", err=True)
    finally:  # the timeline is most useful when the run failed
        if tracer is not None:
            from antler.runtime.tracing import TIMELINE_LEGEND

            click.echo(f"\n{TIMELINE_LEGEND}\n\n{tracer.render()}", err=True)
    if waiting:
        raise click.exceptions.Exit(PAUSED_EXIT_CODE)
    if failed:
        raise click.exceptions.Exit(1)


def _announce_wait(agent: Any, thread_id: str) -> float | None:
    """With --wait on a busy thread, say so before waiting; when the wait began, else None.

    The thread's lock is tried once and let go (a run that takes it in between is
    still waited for, only not announced)."""
    from antler.runtime.storage import ThreadBusyError

    locks = agent.storage.locks if agent.storage is not None else None
    if locks is None:
        return None
    try:
        with locks.hold(thread_id, wait=False):
            return None
    except ThreadBusyError:
        click.echo(f"[waiting] thread {thread_id!r} is busy: another run is working on it. "
                   "Waiting for it to finish (Ctrl-C stops waiting; the thread keeps what it "
                   "saved)...", err=True)
        return time.monotonic()


def _remember(thread_dir: Path, model: Any, config_path: str | None, spec: str) -> None:
    """Store the flags and the scripted model's position with the thread."""
    from antler.runtime.threadrecord import save_record, script_identity

    record: dict[str, Any] = {"config": str(Path(config_path).absolute()) if config_path
                              else None, "model": spec}
    identity = script_identity(model)
    if identity is not None:
        record["script"] = {"identity": identity, "position": model.position}
    with contextlib.suppress(OSError):
        save_record(thread_dir, record)


def _already_shown(agent: Any, thread_id: str) -> dict[Any, str]:
    """The paused run printed its last message's tool calls: a resume does not again."""
    shown: dict[Any, str] = {}
    messages = (agent.state(thread_id) if agent.checkpointer else {}).get("messages") or []
    for message in reversed(messages):
        if type(message).__name__ == "AIMessage":
            shown.update({("call", call.get("id")): "" for call in message.tool_calls or []})
            shown[message.id] = str(message.content) if message.content else ""
            break
    return shown


def _not_waiting(agent: Any, thread_id: str, record: dict[str, Any],
                 now: dict[str, str | None]) -> str:
    """Why there is nothing to resume, and which flags differ when that is the reason."""
    from antler.runtime.approvals import checkpoint_interrupts

    stored = checkpoint_interrupts(agent, thread_id)
    if not stored:
        return f"thread {thread_id!r} is not waiting for a decision; nothing to resume"
    if now.get("config"):
        now = {**now, "config": str(Path(str(now["config"])).absolute())}
    differ = [f"--{flag} {record.get(flag) or '(none)'} (now {now.get(flag) or '(none)'})"
              for flag in ("config", "model") if record and record.get(flag) != now.get(flag)]
    hint = (f"the paused run used {', '.join(differ)}" if differ
            else "resume with the --config of the run that paused")
    return (f"thread {thread_id!r} waits for a decision ({len(stored)} pending interrupt"
            f"{'s' * (len(stored) != 1)} in its checkpoint), but this chain does not have the "
            f"step that asked for it: {hint}")


def _echo_waiting(thread_id: str, pending: list[Any]) -> None:
    """Say that the run waits for a decision, what is pending, and how to go on."""
    from antler.runtime.approvals import pending_actions

    actions = pending_actions(pending)
    click.echo(f"[waiting] the run is waiting for approval of {len(actions)} action"
               f"{'s' * (len(actions) != 1)}:", err=True)
    for action in actions:
        allowed = "/".join(action.get("allowed", ())) or "approve/edit/reject"
        click.echo(f"  {action['name']}({_short(action.get('args'))})  [{allowed}]", err=True)
    click.echo(f"continue with: antler resume {thread_id} --approve | --reject [--message "
               "WHY] | --edit JSON   (same --config/--model as this run)", err=True)


def _read_prompt(prompt: str | None, prompt_file: str | None) -> str:
    """The prompt from the argument, a file or standard input ('-'), checked."""
    from antler.errors import AntlerError

    if (prompt is None) == (prompt_file is None):
        raise click.UsageError("give the prompt as an argument, or with --prompt-file FILE "
                               "('-' for standard input), not both")
    source = prompt_file if prompt_file is not None else prompt
    if prompt_file is None and prompt != "-":
        return str(prompt)
    where = "standard input" if source == "-" else f"the prompt file {source}"
    try:
        if source == "-":
            with click.open_file("-", "rb") as stdin:
                data = stdin.read()
        else:
            data = Path(str(source)).read_bytes()
        text = data.decode("utf-8")
    except OSError as exc:
        raise AntlerError(f"cannot read {where}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise AntlerError(f"{where} is not UTF-8 text (byte {exc.start}); convert it to "
                          "UTF-8 first") from exc
    if not text.strip():
        raise AntlerError(f"{where} is empty: there is no prompt to run")
    return text


STOP_GRACE_SECONDS = 10.0
"""How long a stopped `antler run` waits for its main thread to take the stop before it
ends the process (a hook that never returns would otherwise keep it running)."""


class _Stopped(KeyboardInterrupt):
    """Ctrl-C or SIGTERM reached `antler run`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stops_commands(agent: Any, thread_id: str) -> Iterator[None]:
    """Ctrl-C and SIGTERM kill the running commands first, then stop the run.

    Without this the signal waits for the command it interrupted (up to the
    command timeout): a signal reaching a worker thread does not wake the main
    thread. So the signals are blocked in the main thread and every thread the
    run starts, and one watcher thread takes them. Whichever thread the kernel
    hands a signal to (the watcher, or a thread started before the run, which
    does not block it), the interpreter's handler notes the stop for the main
    thread and writes the signal's number to a pipe (`signal.set_wakeup_fd`),
    which wakes the watcher: it kills the commands (their calls then end at
    once, and the main thread takes the stop) and ends the process if the main
    thread has not taken it within `STOP_GRACE_SECONDS`. A stopped run keeps
    the checkpoints it saved: running the same thread again reports the
    unfinished calls as interrupted.
    """
    import gc
    import select
    import signal
    import threading

    signals = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    done = threading.Event()
    reader, writer = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def watch() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)  # the run's one taker
        while not done.is_set():
            select.select([reader], [], [])
            try:
                numbers = os.read(reader, 64)
            except BlockingIOError:  # read by an earlier pass
                continue
            received = [signum for signum in numbers if signum in signals]
            if received and not done.is_set():
                stopped(received[0])

    def stopped(signum: int) -> None:
        # The main thread's stop is noted already (before the pipe was written): it takes
        # it as soon as the command's kill wakes it, before the command's call can raise
        # `CommandInterrupted` (which would leave the stop to arrive during cleanup).
        provider = agent.services.items.get("sandbox_provider")
        if provider is not None:
            provider.interrupt()
        if not done.wait(STOP_GRACE_SECONDS):
            # Something that never returns to Python (a plugin's hook blocked in a sleep
            # or a lock) keeps the main thread from taking the stop: end here. The thread
            # keeps the checkpoints it saved, as after any stop.
            os.write(2, (f"\nstopped: the run did not stop within {STOP_GRACE_SECONDS:g} s "
                         f"(a plugin's hook does not return); thread {thread_id!r} keeps "
                         "what it saved\n").encode())
            os._exit(128 + signum)

    def stop(signum: int, _frame: Any) -> None:
        raise _Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in signals}
    previous_wakeup = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # inherited by new threads
    watcher = threading.Thread(target=watch, name="antler-run-signals", daemon=True)
    watcher.start()
    try:
        yield
    except _Stopped as stopped_by:
        # The interpreter's last garbage collection of LangChain's objects can take
        # seconds; a stopped run has nothing left to finalize, so skip it.
        gc.freeze()
        click.echo(f"\nstopped: thread {thread_id!r} keeps what it saved; run again with "
                   f"--thread {thread_id} to continue it.", err=True)
        raise click.exceptions.Exit(128 + stopped_by.signum) from None
    finally:
        done.set()
        os.write(writer, b"\0")  # wakes the watcher to see that the run is over
        watcher.join()
        signal.set_wakeup_fd(previous_wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(reader)
        os.close(writer)


def _echo_interrupted(calls: list[dict[str, Any]]) -> None:
    """Say which calls of the thread's last run stopped before their result was saved."""
    for call in calls:
        click.echo(f"[interrupted] {call.get('name')}({_short(call.get('args'))}) started in "
                   "an earlier run that stopped before its result was saved; it was not run "
                   "again.", err=True)


def _echo_tokens(chunk: Any, metadata: dict[str, Any], streamed: set[str]) -> None:
    """Print the lead model's answer as it streams (providers that stream send tokens).

    Only the agent's own model node: the title, memory and summary models and the
    subagent's steps are not the answer.
    """
    if metadata.get("langgraph_node") != "model" or not type(chunk).__name__.startswith(
            "AIMessage"):
        return
    text = getattr(chunk, "text", "")
    if text:
        click.echo(text, nl=False)
        if chunk.id:
            streamed.add(chunk.id)


class _SavedResults:
    """The tool results the thread has saved, so `antler run` shows a result only once a
    crash can no longer take it away.

    LangGraph streams a task's writes while their save is still running in the
    background; the checkpointer (`DualSaver.listen_to_writes`) says when it is
    done. A result whose save failed, or has not finished within
    `SAVE_WAIT_SECONDS`, is shown marked as not saved.
    """

    SAVE_WAIT_SECONDS = 15.0
    """Longer than a write waits for another process's lock before it fails."""

    def __init__(self) -> None:
        self._outcomes: dict[str, BaseException | None] = {}
        self._changed = threading.Condition()

    @classmethod
    @contextlib.contextmanager
    def of(cls, agent: Any) -> Iterator[_SavedResults | None]:
        """The saved results of `agent`'s runs while the block runs; None when its
        checkpointer keeps nothing beyond the process (memory, none)."""
        from antler.runtime.storage import DualSaver

        saver = agent.storage.saver if agent.storage is not None else None
        if not isinstance(saver, DualSaver):
            yield None
            return
        saved = cls()
        stop = saver.listen_to_writes(saved.record)
        try:
            yield saved
        finally:
            stop()

    def record(self, writes: Any, error: BaseException | None) -> None:
        ids = [message.id for _channel, value in writes
               for message in (value if isinstance(value, (list, tuple)) else [value])
               if getattr(message, "type", None) == "tool" and getattr(message, "id", None)]
        if ids:
            with self._changed:
                self._outcomes.update(dict.fromkeys(ids, error))
                self._changed.notify_all()

    def mark(self, message_id: str | None) -> str:
        """'' once the result `message_id` is saved; else what to add to its line."""
        if not message_id:  # nothing to match its save by (LangGraph gives saved ones ids)
            return ""
        with self._changed:
            self._changed.wait_for(lambda: message_id in self._outcomes,
                                   timeout=self.SAVE_WAIT_SECONDS)
            if message_id not in self._outcomes:
                return " [not saved yet]"
            error = self._outcomes[message_id]
        return "" if error is None else " [not saved: the thread will not have this result]"


def _echo_update(update: dict[str, Any], streamed: set[str], shown: dict[Any, str],
                 saved: _SavedResults | None = None) -> None:
    """Print what a graph step added: assistant text, tool calls, tool results.

    A plugin that edits a message (merging token usage into it, stripping its
    calls, appending a note) sends it again under the same id: only what was
    not printed yet is printed (`shown` remembers what was). A tool result is
    printed once `saved` says the thread has it (or marked as not saved).
    """
    for change in update.values():
        messages = (change or {}).get("messages", []) if isinstance(change, dict) else []
        for message in messages if isinstance(messages, list) else [messages]:
            kind = type(message).__name__
            if kind == "AIMessage":
                text = str(message.content) if message.content else ""
                before = shown.get(message.id)
                if message.id in streamed and before is None:
                    click.echo()  # end the streamed line before a tool line follows it
                for call in getattr(message, "tool_calls", []) or []:
                    if ("call", call.get("id")) not in shown:
                        shown[("call", call.get("id"))] = ""
                        click.echo(f"-> {call['name']}({_short(call.get('args'))})", err=True)
                if message.id not in streamed and text and text != before:  # not streamed
                    grown = bool(before) and text.startswith(before or "")
                    click.echo(text[len(before or ""):].lstrip("\n") if grown else text)
                shown[message.id] = text
            elif kind == "ToolMessage" and ("tool", message.id) not in shown:
                shown[("tool", message.id)] = ""
                mark = saved.mark(message.id) if saved is not None else ""
                artifact = getattr(message, "artifact", None)
                if isinstance(artifact, dict) and "human_input" in artifact:
                    click.echo(f"[clarification] {message.content}{mark}")
                else:
                    click.echo(f"<- {message.name}: "
                               f"{_short(content_text(message.content))}{mark}", err=True)


class _Outcome:
    """How the run ended: its stop reason, token totals and whether the reply is an error.

    Read from the final state when the thread is checkpointed, else from what
    the streamed updates carried.
    """

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def collect(self, update: dict[str, Any]) -> None:
        from antler.contracts.stop_reason import STOP_REASON_KEY
        from antler.contracts.usage import USAGE_KEY

        for change in update.values():
            if not isinstance(change, dict):
                continue
            for key in (STOP_REASON_KEY, USAGE_KEY):
                if key in change:
                    self.seen[key] = change[key]
            messages = change.get("messages", [])
            for message in messages if isinstance(messages, list) else [messages]:
                if type(message).__name__ == "AIMessage":
                    self.seen["messages"] = [message]

    def report(self, state: dict[str, Any], run_id: str, *, usage: bool) -> bool:
        """Print the stop reason, the token totals and an error reply's reason; True if failed."""
        from antler.contracts.fallback import error_fallback_of
        from antler.contracts.stop_reason import describe_stop_reason, stop_reason_of
        from antler.contracts.usage import describe_usage, run_usage_of

        values = state or self.seen
        stop = stop_reason_of(values, run_id)
        if stop is not None:
            click.echo(f"[stop] {describe_stop_reason(stop)}", err=True)
        totals = run_usage_of(values, run_id) if usage else None
        if totals is not None:
            click.echo(f"[tokens] {describe_usage(totals)}", err=True)
        messages = values.get("messages") or []
        fallback = error_fallback_of(messages[-1]) if messages else None
        if fallback is not None:
            click.echo(f"[error] {fallback.get('reason') or fallback.get('error_type')}",
                       err=True)
        return fallback is not None


def content_text(content: Any) -> Any:
    """A message's content as text where it is text: the text of its content blocks
    (an MCP tool's result is a list of `{type: text, text}` blocks); else unchanged."""
    if not isinstance(content, list):
        return content
    parts = [block if isinstance(block, str) else block.get("text")
             for block in content
             if isinstance(block, str) or (isinstance(block, dict)
                                           and block.get("type") == "text")]
    texts = [part for part in parts if isinstance(part, str)]
    if len(texts) != len(content):  # images or other blocks: say what they are
        texts += [f"[{block.get('type', 'block')}]" for block in content
                  if isinstance(block, dict) and block.get("type") != "text"]
    return "\n".join(texts)


def _short(value: Any, limit: int = 120) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# A command's click decorators are its interface, so commands that take the same options
# list them alike (here as in `antler config check`).
@click.command("demo")
@click.option("--home", type=click.Path(file_okay=False), default=None,
              help="Base directory, kept (default: $ANTLER_HOME, else a temporary directory "
                   "removed at the end unless --keep).")
@click.option("--keep", is_flag=True,
              help="Keep the temporary directory, to look at the thread's files afterwards.")
@manifest_option
@pass_session
def demo_command(session: Session, home: str | None, keep: bool) -> None:
    """Play a two-turn conversation through the real lead chain, with no API key.

    The timelines list each hook with its time; a wrap hook's time includes
    everything it wraps (see the legend printed with them). Plugins from
    --manifest files join the chain like installed ones.
    """
    import os
    import shutil
    import tempfile

    from antler.plugin_api.paths import ANTLER_HOME_ENV
    from antler.runtime.demo import render_demo, run_demo

    chosen = home or os.environ.get(ANTLER_HOME_ENV)
    if chosen:
        click.echo(render_demo(run_demo(Path(chosen), registry=session.registry())))
        return
    scratch = Path(tempfile.mkdtemp(prefix="antler-demo-"))
    try:
        click.echo(render_demo(run_demo(scratch, registry=session.registry()), kept=keep))
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
