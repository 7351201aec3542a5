"""Chat models: the offline scripted model and resolution of a config's model spec."""

from .catalog import ModelCatalog, resolve_reference, side_call_model
from .factory import ModelConfigError, check_provider, package_for_spec, resolve_chat_model
from .scripted import (
    ScriptedChatModel,
    ScriptedRequest,
    ScriptError,
    ScriptExhaustedError,
    ScriptTurn,
    parse_script,
)

__all__ = [
    "ModelCatalog",
    "ModelConfigError",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptTurn",
    "ScriptedChatModel",
    "ScriptedRequest",
    "check_provider",
    "package_for_spec",
    "parse_script",
    "resolve_chat_model",
    "resolve_reference",
    "side_call_model",
]
