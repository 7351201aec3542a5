"""An example auth handler for LangGraph Server: bearer tokens from a token table.

`langgraph.json` names it (`"auth": {"path": "antler.contrib.server_auth:auth"}`).
Every request must carry `Authorization: Bearer <token>`; the token is looked up
in the table `ANTLER_AUTH_TOKENS` holds, either the path of a YAML or JSON file
or the mapping itself::

    # tokens.yaml
    s3cret-alice: {user: alice, roles: [agent]}
    s3cret-admin: {user: root, roles: [agent, admin]}

The authenticated user (`identity`, `roles`) is what the served graph sees as
the run's identity (`antler.contracts.runcontext.authenticated`): user id and
roles for the thread directories, memory and the authorization plugin.

Authorization: threads, runs and crons carry their creator in metadata
(`owner`) and every read, search, update or run is filtered by it, so a user
cannot see, continue or delete another user's thread (the server answers 404).
Assistants may be read by everyone and changed only by the `admin` role. Store
items are reachable only in the user's own namespaces, told by exact
components (`antler.contracts.storenames.owner_of`): ``(<user>, ...)`` and the
user's memory, ``("antler", "memory", <user>)``; never Antler's other
namespaces, whatever the user's id. Anything the handler has no rule for (a
resource or action the server adds later) is refused, not let through.

What a state update or a run's input writes is not the handler's to check:
the served graph holds it to the input boundary for every handler
(`antler.runtime.stateupdates`, `antler.runtime.serverapp`).

This is an example to adapt: production deployments usually verify a signed
token (JWT) from their identity provider instead of a table.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph_sdk import Auth

from antler.plugin_api import (
    MEMORY_NAMESPACE,
    SourceLimitError,
    YamlSyntaxError,
    load_yaml,
    max_file_bytes,
    owner_of,
    read_bounded,
)

__all__ = ["TOKENS_ENV", "TokenTable", "TokenTableError", "auth", "load_token_table"]

TOKENS_ENV = "ANTLER_AUTH_TOKENS"
ADMIN_ROLE = "admin"


class TokenTableError(ValueError):
    """The token table cannot be read or has the wrong shape; the message says where."""


@dataclass(frozen=True)
class TokenEntry:
    user: str
    roles: tuple[str, ...]


class TokenTable:
    """Tokens by their SHA-256 digest, compared in constant time."""

    def __init__(self, entries: Mapping[str, TokenEntry]) -> None:
        self._entries = {_digest(token): entry for token, entry in entries.items()}

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, token: str) -> TokenEntry | None:
        wanted = _digest(token)
        found = None
        for digest, entry in self._entries.items():  # no early exit: timing says nothing
            if hmac.compare_digest(digest, wanted):
                found = entry
        return found


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def load_token_table(value: str | None) -> TokenTable:
    """The table from `ANTLER_AUTH_TOKENS`'s value: a file path, or YAML/JSON inline."""
    if not value or not value.strip():
        return TokenTable({})
    text, source = value, f"${TOKENS_ENV}"
    if not value.lstrip().startswith("{"):
        path = Path(value).expanduser()
        try:
            text, source = read_bounded(path), str(path)
        except SourceLimitError as exc:
            raise TokenTableError(
                f"{TOKENS_ENV} names a token file that cannot be read or used ({exc}); point "
                "it at a YAML file of `<token>: {user: <id>, roles: [...]}` or give the "
                "mapping inline") from None
    elif len(value) > max_file_bytes():
        raise TokenTableError(f"{TOKENS_ENV} holds more than {max_file_bytes():,} characters; "
                              "put the table in a file, or raise ANTLER_MAX_FILE_BYTES")
    try:
        data = load_yaml(text, source).data  # JSON is YAML too
    except YamlSyntaxError as exc:
        problem = exc.problem
        if problem.startswith("duplicate key"):  # the key is a token: never print it
            problem = "a token is listed twice; keep one"
        raise TokenTableError(f"the token table in {source} is not valid YAML or JSON: line "
                              f"{exc.line or 1}: {problem}") from None
    if data is None:
        return TokenTable({})
    if not isinstance(data, Mapping):
        raise TokenTableError(f"the token table in {source} must map tokens to "
                              f"{{user: ..., roles: [...]}}, got {type(data).__name__}")
    return TokenTable({str(token): _entry(source, str(token), spec)
                       for token, spec in data.items()})


def _entry(source: str, token: str, spec: Any) -> TokenEntry:
    shown = f"{token[:4]}..." if len(token) > 4 else "a short token"
    if not isinstance(spec, Mapping) or not isinstance(spec.get("user"), str) \
            or not spec["user"].strip():
        raise TokenTableError(f"the token table in {source}: the entry of {shown} needs "
                              "`user: <id>` (and optionally `roles: [...]`)")
    unknown = set(spec) - {"user", "roles"}
    if unknown:
        raise TokenTableError(f"the token table in {source}: the entry of {shown} has "
                              f"unknown keys {sorted(unknown)}; only `user` and `roles`")
    roles = spec.get("roles") or []
    if isinstance(roles, str) or not all(isinstance(role, str) for role in roles):
        raise TokenTableError(f"the token table in {source}: the roles of {shown} must "
                              "be a list of names, e.g. [agent]")
    return TokenEntry(spec["user"], tuple(roles))


_TABLE = load_token_table(os.environ.get(TOKENS_ENV))

auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None) -> dict[str, Any]:
    """The user of the request's bearer token (`identity`, `roles`); 401 without a known one.

    `roles` is an extra field of the user, which LangGraph passes on to the graph.
    """
    if not len(_TABLE):
        raise Auth.exceptions.HTTPException(
            status_code=401, detail=f"no API tokens are configured: set {TOKENS_ENV} on the "
                                    "server to a token table")
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Auth.exceptions.HTTPException(
            status_code=401, detail="send `Authorization: Bearer <token>`")
    entry = _TABLE.lookup(token.strip())
    if entry is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="unknown token")
    return {"identity": entry.user, "roles": list(entry.roles), "permissions": []}


def _owned(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Stamp the creator on what is created; let each user see only what they own."""
    owner = ctx.user.identity
    if isinstance(value, dict):
        # In place: the server keeps its own reference to the metadata it passed in.
        metadata = value.get("metadata")
        if not isinstance(metadata, dict):
            metadata = value["metadata"] = {}
        metadata["owner"] = owner
    return {"owner": owner}


@auth.on.threads
async def own_threads(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    return _owned(ctx, value)


@auth.on.crons
async def own_crons(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    return _owned(ctx, value)


@auth.on.assistants
async def shared_assistants(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Everyone may use the served assistants; only admins create, change or delete them."""
    if ctx.action in ("read", "search") or ADMIN_ROLE in _roles(ctx.user):
        return True
    raise Auth.exceptions.HTTPException(
        status_code=403, detail=f"changing assistants needs the {ADMIN_ROLE!r} role")


@auth.on.store
async def own_namespace(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """A user reaches the store namespaces that are theirs by exact components, no other.

    Listing namespaces without a prefix lists the user's own, ``(<user>, ...)``.
    """
    user = ctx.user.identity
    namespace = value.get("namespace") if isinstance(value, dict) else None
    if namespace is None and ctx.action == "list_namespaces" and owner_of((user,)) == user:
        value["namespace"] = (user,)
        return True
    if owner_of(namespace) == user:
        return True
    raise Auth.exceptions.HTTPException(
        status_code=403, detail=f"store namespaces must be your own: ({user!r}, ...) or "
                                f"{(*MEMORY_NAMESPACE, user)!r}")


@auth.on
async def refuse_unknown(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """A resource or action without a rule above: refused, since nothing here checks it."""
    raise Auth.exceptions.HTTPException(
        status_code=403, detail=f"{ctx.resource}.{ctx.action} is not allowed by this server")


def _roles(user: Any) -> tuple[str, ...]:
    try:
        roles = user["roles"]
    except (KeyError, TypeError):
        roles = getattr(user, "roles", ())
    return tuple(roles or ())
