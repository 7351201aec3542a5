"""`antler run` and `antler demo`: running a real agent through the plugin chain.

Kept apart from the read-only chain/config commands because these import
LangChain and build graphs; `antler chain show` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


@click.command("run")
@click.argument("prompt")
@click.option("--thread", "thread_id", default=None, help="Thread id (default: a new one).")
@click.option("--user", "user_id", default="default", show_default=True, help="User id.")
@click.option("--upload", "uploads", multiple=True, type=click.Path(dir_okay=False),
              help="A file to upload with the prompt (repeatable).")
@click.option("--model", "model_spec", default=None,
              help="init_chat_model string ('openai:gpt-4o'), 'scripted:FILE.yaml', ...")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Operator config YAML.")
@click.option("--plan", is_flag=True, help="Plan mode (the todo list joins the chain).")
@click.option("--vision", is_flag=True, default=None, help="The model supports images.")
@click.option("--subagents", is_flag=True, help="Let the agent delegate with `task`.")
@click.option("--home", type=click.Path(file_okay=False), default=None,
              help="Base directory for threads and checkpoints (default: $ANTLER_HOME or "
                   "./.antler).")
@click.option("--trace", is_flag=True, help="Print the timeline of hook invocations.")
@click.option("--fuse/--no-fuse", default=None,
              help="Fuse consecutive node hooks into one graph node (default: the config's "
                   "chain.fuse, which defaults to on).")
def run_command(prompt: str, thread_id: str | None, user_id: str, uploads: tuple[str, ...],
                model_spec: str | None, config_path: str | None, plan: bool,
                vision: bool | None, subagents: bool, home: str | None, trace: bool,
                fuse: bool | None) -> None:
    """Run PROMPT through the lead chain and stream the answer."""
    import uuid

    from antler.chain.config import load_config
    from antler.plugin_api.context import RuntimeOptions
    from antler.plugin_api.registry import discover
    from antler.runtime.agent import create_agent
    from antler.runtime.models import resolve_chat_model
    from antler.runtime.tracing import Tracer
    from antler.runtime.uploads import stage_upload

    registry = discover()
    config = load_config(config_path, registry)
    spec = model_spec or config.models.default
    if spec == "scripted":
        raise click.UsageError(
            "the scripted model needs a script: pass --model scripted:FILE.yaml (a list of "
            "assistant turns) or a real provider such as --model openai:gpt-4o"
        )
    model = resolve_chat_model(spec)
    runtime = RuntimeOptions(
        plan_mode=plan, subagents_enabled=subagents, user_id=user_id,
        supports_vision=config.models.supports_vision if vision is None else vision,
    )
    tracer = Tracer() if trace else None
    thread_id = thread_id or f"thread-{uuid.uuid4().hex[:12]}"
    base = home or config.storage.base_dir
    checkpointer = config.storage.checkpointer
    with create_agent(config, model=model, runtime=runtime, registry=registry, base_dir=base,
                      checkpointer=None if checkpointer == "none" else checkpointer,
                      tracer=tracer, fuse=fuse) as agent:
        paths = agent.services.get("paths").thread(user_id, thread_id)
        files = [stage_upload(paths, upload) for upload in uploads]
        click.echo(f"thread: {thread_id}", err=True)
        streamed: set[str] = set()
        for mode, payload in agent.stream(prompt, thread_id=thread_id, user_id=user_id,
                                          files=files, stream_mode=["messages", "updates"]):
            if mode == "messages":
                chunk, metadata = payload
                _echo_tokens(chunk, metadata, streamed)
            else:
                _echo_update(payload, streamed)
        state = agent.state(thread_id) if agent.checkpointer else {}
        if state.get("title"):
            click.echo(f"[title] {state['title']}", err=True)
        queue = agent.services.items.get("memory_queue")
        if queue is not None:
            queue.flush()
    if tracer is not None:
        click.echo("\n" + tracer.render(), err=True)


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


def _echo_update(update: dict[str, Any], streamed: set[str]) -> None:
    """Print what a graph step added: assistant text, tool calls, tool results."""
    for node, change in update.items():
        messages = (change or {}).get("messages", []) if isinstance(change, dict) else []
        for message in messages if isinstance(messages, list) else [messages]:
            kind = type(message).__name__
            if kind == "AIMessage":
                for call in getattr(message, "tool_calls", []) or []:
                    click.echo(f"-> {call['name']}({_short(call.get('args'))})", err=True)
                if message.id in streamed:
                    click.echo()  # end the streamed line
                elif message.content:
                    click.echo(str(message.content))
            elif kind == "ToolMessage":
                artifact = getattr(message, "artifact", None)
                if isinstance(artifact, dict) and "human_input" in artifact:
                    click.echo(f"[clarification] {message.content}")
                else:
                    click.echo(f"<- {message.name}: {_short(message.content)}", err=True)
        del node


def _short(value: Any, limit: int = 120) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@click.command("demo")
@click.option("--home", type=click.Path(file_okay=False), default=None,
              help="Base directory (default: $ANTLER_HOME, else a new temporary directory, "
                   "kept so you can look at it).")
def demo_command(home: str | None) -> None:
    """Play a two-turn conversation through the real lead chain, with no API key."""
    import os
    import tempfile

    from antler.runtime.demo import render_demo, run_demo
    from antler.runtime.paths import ANTLER_HOME_ENV

    chosen = home or os.environ.get(ANTLER_HOME_ENV)
    base = Path(chosen) if chosen else Path(tempfile.mkdtemp(prefix="antler-demo-"))
    result = run_demo(base)
    click.echo(render_demo(result))

