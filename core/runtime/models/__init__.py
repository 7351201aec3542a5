"""Chat models: the offline scripted model and resolution of a config's model spec."""

from .factory import ModelConfigError, package_for_spec, resolve_chat_model
from .scripted import (
    ScriptedChatModel,
    ScriptedRequest,
    ScriptError,
    ScriptExhaustedError,
    ScriptTurn,
    parse_script,
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
