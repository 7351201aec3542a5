"""Chat models: `resolve_chat_model` and the offline `ScriptedChatModel`.

A stable import path for plugin authors and applications; the code lives in
`antler.runtime.models`.
"""

# A facade, as `antler.agent` is: the names are listed, not star-imported, so a name of
# `antler.runtime.models` joins this stable path only when it is added here on purpose.
from antler.runtime.models import (
    ModelConfigError,
    ScriptedChatModel,
    ScriptedRequest,
    ScriptError,
    ScriptExhaustedError,
    ScriptTurn,
    package_for_spec,
    parse_script,
    resolve_chat_model,
)

__all__ = [
    "ModelConfigError",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptTurn",
    "ScriptedChatModel",
    "ScriptedRequest",
    "package_for_spec",
    "parse_script",
    "resolve_chat_model",
]
