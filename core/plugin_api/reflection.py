"""Turning 'module.path:Attribute' strings into objects, with errors that say what to do.

Operator config and manifests name code by string. Loading one executes code,
so these strings are trusted configuration, never something a runtime API may
write. Every failure says which string, which step failed, and how to fix it.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

from antler.errors import ReflectionError

_PATH_RE = re.compile(r"^(?P<module>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)"
                      r"[:](?P<attr>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")

# Import names whose distribution is named differently, for install hints.
_KNOWN_DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "bs4": "beautifulsoup4",
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
    "dateutil": "python-dateutil",
    "dotenv": "python-dotenv",
    "google": "google-genai",
    "jwt": "pyjwt",
    "docx": "python-docx",
    "magic": "python-magic",
}


def install_hint(module: str) -> str:
    """A pip hint for a missing top-level module, when its distribution is known."""
    top = module.split(".")[0]
    if top in _KNOWN_DISTRIBUTIONS:
        dist = _KNOWN_DISTRIBUTIONS[top]
    elif top.startswith(("langchain_", "langgraph_")):
        dist = top.replace("_", "-")
    else:
        return ""
    return f"; install it with `pip install {dist}`"


def split_path(path: str, what: str = "class path") -> tuple[str, str]:
    """('module.path', 'Attr') from 'module.path:Attr'. DeerFlow's spelling only."""
    if not isinstance(path, str):
        raise ReflectionError(f"{what} must be a string like 'package.module:ClassName', "
                              f"got {type(path).__name__}")
    match = _PATH_RE.match(path.strip())
    if not match:
        hint = ""
        if ":" not in path and "." in path:
            module, _, attr = path.rpartition(".")
            hint = f" (did you mean '{module}:{attr}'?)"
        raise ReflectionError(
            f"{what} {path!r} is not of the form 'package.module:ClassName'{hint}"
        )
    return match["module"], match["attr"]


def resolve_object(path: str, what: str = "class path") -> Any:
    """Import the module of `path` and return the named attribute."""
    module_name, attr = split_path(path, what)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise ReflectionError(
                f"{what} {path!r}: module {missing!r} is not installed{install_hint(missing)}"
                " (or the path is misspelt)"
            ) from exc
        raise ReflectionError(
            f"{what} {path!r}: importing {module_name!r} failed because it needs {missing!r}, "
            f"which is not installed{install_hint(missing)}"
        ) from exc
    except Exception as exc:
        raise ReflectionError(
            f"{what} {path!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    walked = module_name
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            public = sorted(n for n in dir(target) if not n.startswith("_"))
            from .diagnostics import did_you_mean

            raise ReflectionError(
                f"{what} {path!r}: {walked!r} has no attribute {part!r}"
                f"{did_you_mean(part, public)}"
            ) from None
        walked += f".{part}" if walked != module_name else f":{part}"
    return target


def resolve_middleware_class(path: str, what: str = "middleware class") -> type:
    """The `AgentMiddleware` subclass named by `path`."""
    from langchain.agents.middleware import AgentMiddleware

    target = resolve_object(path, what)
    if not (isinstance(target, type) and issubclass(target, AgentMiddleware)):
        if isinstance(target, type):
            kind = f"a class {target!r}"
        elif inspect.isroutine(target):
            kind = "a function"
        else:
            shown = repr(target)
            kind = f"a value of type {type(target).__name__} ({shown[:40]})"
        raise ReflectionError(
            f"{what} {path!r} names {kind}, not a subclass of "
            "langchain.agents.middleware.AgentMiddleware; point it at a middleware class"
        )
    return target


def instantiate(cls: type, path: str, kwargs: dict[str, Any] | None = None) -> Any:
    """`cls(**kwargs)`, turning constructor failures into a clear `ReflectionError`."""
    try:
        return cls(**(kwargs or {}))
    except Exception as exc:
        given = ", ".join(sorted(kwargs or {})) or "no arguments"
        raise ReflectionError(
            f"constructing {path!r} with {given} failed: {type(exc).__name__}: {exc}"
        ) from exc
