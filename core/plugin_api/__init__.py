"""The plugin SDK: everything a plugin imports from Antler, in one place.

A plugin (built in or a third party's) imports `antler.plugin_api` and nothing
else of Antler's, plus `antler.testing` in its tests. The submodules of this
package, `antler.contracts` and the rest of the core are internal: they may
change in any release, while a name listed here changes only as
docs/plugins.md ("Versions and deprecations") says: a name that moves or goes
keeps working, with a `DeprecationWarning` naming its replacement, for one minor
version. The names are imported on first use, so `import antler.plugin_api`
costs nothing until a plugin asks for something (the CLI stays free of
LangChain).

The groups (docs/plugins.md has a section for each):

- Hooks and manifests: the hooks a plugin implements (`hookimpl`) and how its manifest
  is read.
- Build context and services: what a factory receives (`BuildContext`,
  `ctx.plugin_config(Model)`) and the services it may ask for by name.
- Run context and run keys: who runs and in which thread and run (server-owned, never
  from message text).
- Thread paths and files: a run's directories (`ThreadPaths.for_run`), virtual paths,
  confined file access and uploads.
- Models: a config field naming a model, resolving it, side calls (and whether one
  could be traced) and provider failures.
- Provider interfaces: authorization, guardrail and sandbox providers, each loaded by
  name from its entry point group.
- Contracts: what plugins agree on without importing each other: tool-result metadata,
  stop reasons, hidden markers, the write journal, tool groups, usage, deferred tools,
  durable context, fallbacks, server-owned keys, store names.
- History work: per-message memos and history folds, so a hook's work follows the new
  messages, not the thread's length (conformance rule `history_work`).
- Skills: reading a skill's `SKILL.md` (the registry is the `skills` service).
- Commands: a plugin's own `antler` command (entry point group `antler.commands`).
- Errors: the errors a plugin raises or catches (an `AntlerError` reaches the user as
  one line).
- Input within limits: YAML, JSON and files read within the parse limits, suggestions
  and dotted-path objects.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from antler import jsonsource as jsonsource
    from antler.contracts.deferred import (
        DEFERRED_TOOLS as DEFERRED_TOOLS,
    )
    from antler.contracts.deferred import (
        TOOL_SEARCH as TOOL_SEARCH,
    )
    from antler.contracts.deferred import (
        CatalogEntry as CatalogEntry,
    )
    from antler.contracts.deferred import (
        DeferredTools as DeferredTools,
    )
    from antler.contracts.deferred import (
        PromotedState as PromotedState,
    )
    from antler.contracts.deferred import (
        limit_discovery as limit_discovery,
    )
    from antler.contracts.deferred import (
        promoted_names as promoted_names,
    )
    from antler.contracts.deferred import (
        promotion as promotion,
    )
    from antler.contracts.durable import (
        DELEGATIONS_KEY as DELEGATIONS_KEY,
    )
    from antler.contracts.durable import (
        IN_PROGRESS as IN_PROGRESS,
    )
    from antler.contracts.durable import (
        SKILL_CONTEXT_KEY as SKILL_CONTEXT_KEY,
    )
    from antler.contracts.durable import (
        TERMINAL_STATUSES as TERMINAL_STATUSES,
    )
    from antler.contracts.durable import (
        DurableState as DurableState,
    )
    from antler.contracts.durable import (
        merge_delegations as merge_delegations,
    )
    from antler.contracts.durable import (
        run_delegations as run_delegations,
    )
    from antler.contracts.fallback import (
        error_fallback_message as error_fallback_message,
    )
    from antler.contracts.fallback import (
        error_fallback_of as error_fallback_of,
    )
    from antler.contracts.fallback import (
        is_error_fallback as is_error_fallback,
    )
    from antler.contracts.folding import (
        folds_with as folds_with,
    )
    from antler.contracts.mcp import (
        MCP_ADAPTER_PACKAGE as MCP_ADAPTER_PACKAGE,
    )
    from antler.contracts.mcp import (
        is_mcp_tool as is_mcp_tool,
    )
    from antler.contracts.messages import (
        REINSERTED_SUFFIX as REINSERTED_SUFFIX,
    )
    from antler.contracts.messages import (
        has_tool_call_intent as has_tool_call_intent,
    )
    from antler.contracts.messages import (
        hidden_marker as hidden_marker,
    )
    from antler.contracts.messages import (
        hidden_source as hidden_source,
    )
    from antler.contracts.messages import (
        is_hidden as is_hidden,
    )
    from antler.contracts.messages import (
        latest_user_message as latest_user_message,
    )
    from antler.contracts.messages import (
        message_role as message_role,
    )
    from antler.contracts.messages import (
        message_text as message_text,
    )
    from antler.contracts.messages import (
        provider_field as provider_field,
    )
    from antler.contracts.messages import (
        provider_text as provider_text,
    )
    from antler.contracts.messages import (
        refusal_text as refusal_text,
    )
    from antler.contracts.messages import (
        reinserted_from as reinserted_from,
    )
    from antler.contracts.messages import (
        reinserted_id as reinserted_id,
    )
    from antler.contracts.messages import (
        strip_tool_calls as strip_tool_calls,
    )
    from antler.contracts.messages import (
        user_text as user_text,
    )
    from antler.contracts.runcontext import (
        DEFAULT_USER as DEFAULT_USER,
    )
    from antler.contracts.runcontext import (
        RunContext as RunContext,
    )
    from antler.contracts.runcontext import (
        run_context as run_context,
    )
    from antler.contracts.runcontext import (
        run_id_of as run_id_of,
    )
    from antler.contracts.runcontext import (
        run_key_of as run_key_of,
    )
    from antler.contracts.runcontext import (
        thread_id_of as thread_id_of,
    )
    from antler.contracts.runstore import (
        PendingQueue as PendingQueue,
    )
    from antler.contracts.runstore import (
        RunKey as RunKey,
    )
    from antler.contracts.runstore import (
        RunStore as RunStore,
    )
    from antler.contracts.runstore import (
        acall_then_commit as acall_then_commit,
    )
    from antler.contracts.runstore import (
        call_then_commit as call_then_commit,
    )
    from antler.contracts.serverkeys import (
        ARRIVALS_KEY as ARRIVALS_KEY,
    )
    from antler.contracts.serverkeys import (
        server_owned_keys as server_owned_keys,
    )
    from antler.contracts.serverkeys import (
        strip_server_owned as strip_server_owned,
    )
    from antler.contracts.stop_reason import (
        StopReasonState as StopReasonState,
    )
    from antler.contracts.stop_reason import (
        describe_stop_reason as describe_stop_reason,
    )
    from antler.contracts.stop_reason import (
        record_stop_reason as record_stop_reason,
    )
    from antler.contracts.stop_reason import (
        stop_reason_of as stop_reason_of,
    )
    from antler.contracts.storenames import (
        MEMORY_NAMESPACE as MEMORY_NAMESPACE,
    )
    from antler.contracts.storenames import (
        PENDING_NAMESPACE as PENDING_NAMESPACE,
    )
    from antler.contracts.storenames import (
        owner_of as owner_of,
    )
    from antler.contracts.toolgroups import (
        FILE_READ_TOOLS as FILE_READ_TOOLS,
    )
    from antler.contracts.toolgroups import (
        FILE_WRITE_TOOLS as FILE_WRITE_TOOLS,
    )
    from antler.contracts.toolgroups import (
        SANDBOX_TOOLS as SANDBOX_TOOLS,
    )
    from antler.contracts.toolgroups import (
        TOOL_GROUPS as TOOL_GROUPS,
    )
    from antler.contracts.toolgroups import (
        expand as expand_tool_groups,
    )
    from antler.contracts.toolmeta import (
        TOOL_META_KEY as TOOL_META_KEY,
    )
    from antler.contracts.toolmeta import (
        ToolMeta as ToolMeta,
    )
    from antler.contracts.toolmeta import (
        classify_error_text as classify_error_text,
    )
    from antler.contracts.toolmeta import (
        is_error_payload as is_error_payload,
    )
    from antler.contracts.toolmeta import (
        refusal as refusal,
    )
    from antler.contracts.toolmeta import (
        result_meta as result_meta,
    )
    from antler.contracts.toolmeta import (
        tool_meta as tool_meta,
    )
    from antler.contracts.toolmeta import (
        validate_tool_meta as validate_tool_meta,
    )
    from antler.contracts.toolmeta import (
        with_tool_meta as with_tool_meta,
    )
    from antler.contracts.tooloutput import (
        OUTPUT_BUDGET_SERVICE as OUTPUT_BUDGET_SERVICE,
    )
    from antler.contracts.tooloutput import (
        TOOL_OUTPUT_KEY as TOOL_OUTPUT_KEY,
    )
    from antler.contracts.tooloutput import (
        TOOL_RESULTS_DIRNAME as TOOL_RESULTS_DIRNAME,
    )
    from antler.contracts.tooloutput import (
        budgeted_output as budgeted_output,
    )
    from antler.contracts.tooloutput import (
        is_tool_result_path as is_tool_result_path,
    )
    from antler.contracts.usage import (
        ATTRIBUTED_KEY as ATTRIBUTED_KEY,
    )
    from antler.contracts.usage import (
        FIELDS as USAGE_FIELDS,
    )
    from antler.contracts.usage import (
        SUBAGENT_USAGE_KEY as SUBAGENT_USAGE_KEY,
    )
    from antler.contracts.usage import (
        USAGE_KEY as USAGE_KEY,
    )
    from antler.contracts.usage import (
        add_usage as add_usage,
    )
    from antler.contracts.usage import (
        normalize_usage as normalize_usage,
    )
    from antler.contracts.usage import (
        run_usage_of as run_usage_of,
    )
    from antler.contracts.usage import (
        usage_of as usage_of,
    )
    from antler.contracts.writes import (
        WRITES_KEY as WRITES_KEY,
    )
    from antler.contracts.writes import (
        MessageWrites as MessageWrites,
    )
    from antler.contracts.writes import (
        merge_writes as merge_writes,
    )
    from antler.errors import (
        AntlerError as AntlerError,
    )
    from antler.errors import (
        BuildError as BuildError,
    )
    from antler.errors import (
        ConfigError as ConfigError,
    )
    from antler.errors import (
        PluginHookError as PluginHookError,
    )
    from antler.errors import (
        ReflectionError as ReflectionError,
    )
    from antler.errors import (
        StateWriteError as StateWriteError,
    )
    from antler.parselimits import (
        SourceLimitError as SourceLimitError,
    )
    from antler.parselimits import (
        max_file_bytes as max_file_bytes,
    )
    from antler.parselimits import (
        read_bounded as read_bounded,
    )
    from antler.plugin_api import confined as confined
    from antler.plugin_api.commands import (
        CommandError as CommandError,
    )
    from antler.plugin_api.commands import (
        CommandSession as CommandSession,
    )
    from antler.plugin_api.commands import (
        config_option as config_option,
    )
    from antler.plugin_api.commands import (
        console as console,
    )
    from antler.plugin_api.commands import (
        home_option as home_option,
    )
    from antler.plugin_api.commands import (
        json_option as json_option,
    )
    from antler.plugin_api.commands import (
        pass_session as pass_session,
    )
    from antler.plugin_api.commands import (
        print_json as print_json,
    )
    from antler.plugin_api.context import (
        CLOCK as CLOCK,
    )
    from antler.plugin_api.context import (
        DEPLOYMENT as DEPLOYMENT,
    )
    from antler.plugin_api.context import (
        MEMORY_MODEL as MEMORY_MODEL,
    )
    from antler.plugin_api.context import (
        MEMORY_QUEUE as MEMORY_QUEUE,
    )
    from antler.plugin_api.context import (
        MEMORY_STORE as MEMORY_STORE,
    )
    from antler.plugin_api.context import (
        MODEL as MODEL,
    )
    from antler.plugin_api.context import (
        MODEL_CATALOG as MODEL_CATALOG,
    )
    from antler.plugin_api.context import (
        PATHS as PATHS,
    )
    from antler.plugin_api.context import (
        SANDBOX_LOADER as SANDBOX_LOADER,
    )
    from antler.plugin_api.context import (
        SANDBOX_PROVIDER as SANDBOX_PROVIDER,
    )
    from antler.plugin_api.context import (
        SKILLS as SKILLS,
    )
    from antler.plugin_api.context import (
        SKILLS_LOADER as SKILLS_LOADER,
    )
    from antler.plugin_api.context import (
        STORE as STORE,
    )
    from antler.plugin_api.context import (
        STORE_OPENER as STORE_OPENER,
    )
    from antler.plugin_api.context import (
        SUBAGENT_RUNNER as SUBAGENT_RUNNER,
    )
    from antler.plugin_api.context import (
        TITLE_MODEL as TITLE_MODEL,
    )
    from antler.plugin_api.context import (
        BuildContext as BuildContext,
    )
    from antler.plugin_api.context import (
        ChainSecrets as ChainSecrets,
    )
    from antler.plugin_api.context import (
        RuntimeOptions as RuntimeOptions,
    )
    from antler.plugin_api.context import (
        Services as Services,
    )
    from antler.plugin_api.diagnostics import (
        did_you_mean as did_you_mean,
    )
    from antler.plugin_api.historyfold import (
        HistoryFold as HistoryFold,
    )
    from antler.plugin_api.hookspecs import (
        PROJECT as PROJECT,
    )
    from antler.plugin_api.hookspecs import (
        ChainView as ChainView,
    )
    from antler.plugin_api.hookspecs import (
        ConfigView as ConfigView,
    )
    from antler.plugin_api.hookspecs import (
        hookimpl as hookimpl,
    )
    from antler.plugin_api.hookspecs import (
        hookspec as hookspec,
    )
    from antler.plugin_api.manifest import (
        Manifest as Manifest,
    )
    from antler.plugin_api.manifest import (
        builtin_plugin_hook as builtin_plugin_hook,
    )
    from antler.plugin_api.manifest import (
        load_manifest as load_manifest,
    )
    from antler.plugin_api.manifest import (
        load_manifest_text as load_manifest_text,
    )
    from antler.plugin_api.manifest import (
        load_package_manifest as load_package_manifest,
    )
    from antler.plugin_api.manifest import (
        manifest_plugin_hook as manifest_plugin_hook,
    )
    from antler.plugin_api.manifest import (
        parse_manifest as parse_manifest,
    )
    from antler.plugin_api.messagememo import (
        MessageMemo as MessageMemo,
    )
    from antler.plugin_api.modelerrors import (
        describe_provider_error as describe_provider_error,
    )
    from antler.plugin_api.modelerrors import (
        unreachable as unreachable,
    )
    from antler.plugin_api.models import (
        ModelSpec as ModelSpec,
    )
    from antler.plugin_api.models import (
        resolve_model as resolve_model,
    )
    from antler.plugin_api.models import (
        side_call_model as side_call_model,
    )
    from antler.plugin_api.paths import (
        SKILLS_VIRTUAL_ROOT as SKILLS_VIRTUAL_ROOT,
    )
    from antler.plugin_api.paths import (
        VIRTUAL_ROOT as VIRTUAL_ROOT,
    )
    from antler.plugin_api.paths import (
        InvalidIdentifierError as InvalidIdentifierError,
    )
    from antler.plugin_api.paths import (
        MissingThreadIdError as MissingThreadIdError,
    )
    from antler.plugin_api.paths import (
        PathEscapeError as PathEscapeError,
    )
    from antler.plugin_api.paths import (
        PathLayout as PathLayout,
    )
    from antler.plugin_api.paths import (
        ThreadPaths as ThreadPaths,
    )
    from antler.plugin_api.paths import (
        VirtualPathMapper as VirtualPathMapper,
    )
    from antler.plugin_api.paths import (
        resolve_base as resolve_base,
    )
    from antler.plugin_api.paths import (
        validate_id as validate_id,
    )
    from antler.plugin_api.providers import (
        AUTHORIZATION_AUDIT_LOGGER as AUTHORIZATION_AUDIT_LOGGER,
    )
    from antler.plugin_api.providers import (
        AUTHORIZATION_PROVIDER as AUTHORIZATION_PROVIDER,
    )
    from antler.plugin_api.providers import (
        AUTHORIZATION_PROVIDER_GROUP as AUTHORIZATION_PROVIDER_GROUP,
    )
    from antler.plugin_api.providers import (
        GUARDRAIL_AUDIT_LOGGER as GUARDRAIL_AUDIT_LOGGER,
    )
    from antler.plugin_api.providers import (
        GUARDRAIL_PROVIDER as GUARDRAIL_PROVIDER,
    )
    from antler.plugin_api.providers import (
        GUARDRAIL_PROVIDER_GROUP as GUARDRAIL_PROVIDER_GROUP,
    )
    from antler.plugin_api.providers import (
        Action as Action,
    )
    from antler.plugin_api.providers import (
        AuthorizationProvider as AuthorizationProvider,
    )
    from antler.plugin_api.providers import (
        AuthzError as AuthzError,
    )
    from antler.plugin_api.providers import (
        Decision as Decision,
    )
    from antler.plugin_api.providers import (
        GuardrailProvider as GuardrailProvider,
    )
    from antler.plugin_api.providers import (
        GuardrailRequest as GuardrailRequest,
    )
    from antler.plugin_api.providers import (
        Principal as Principal,
    )
    from antler.plugin_api.providers import (
        ProviderConfigError as ProviderConfigError,
    )
    from antler.plugin_api.providers import (
        ProviderLoadError as ProviderLoadError,
    )
    from antler.plugin_api.providers import (
        UnknownProviderError as UnknownProviderError,
    )
    from antler.plugin_api.providers import (
        aevaluate as aevaluate,
    )
    from antler.plugin_api.providers import (
        audit_decision as audit_decision,
    )
    from antler.plugin_api.providers import (
        available_authorization_providers as available_authorization_providers,
    )
    from antler.plugin_api.providers import (
        available_guardrail_providers as available_guardrail_providers,
    )
    from antler.plugin_api.providers import (
        denied_tool_message as denied_tool_message,
    )
    from antler.plugin_api.providers import (
        evaluate as evaluate,
    )
    from antler.plugin_api.providers import (
        load_authorization_provider as load_authorization_provider,
    )
    from antler.plugin_api.providers import (
        load_guardrail_provider as load_guardrail_provider,
    )
    from antler.plugin_api.providers import (
        principal_from_context as principal_from_context,
    )
    from antler.plugin_api.providers import (
        resolve_authorization_provider as resolve_authorization_provider,
    )
    from antler.plugin_api.providers import (
        tool_name as tool_name,
    )
    from antler.plugin_api.reflection import (
        instantiate as instantiate,
    )
    from antler.plugin_api.reflection import (
        resolve_object as resolve_object,
    )
    from antler.plugin_api.reflection import (
        split_path as split_path,
    )
    from antler.plugin_api.sandbox import (
        SANDBOX_PROVIDER_GROUP as SANDBOX_PROVIDER_GROUP,
    )
    from antler.plugin_api.sandbox import (
        CommandInterrupted as CommandInterrupted,
    )
    from antler.plugin_api.sandbox import (
        CommandResult as CommandResult,
    )
    from antler.plugin_api.sandbox import (
        GlobResult as GlobResult,
    )
    from antler.plugin_api.sandbox import (
        GrepResult as GrepResult,
    )
    from antler.plugin_api.sandbox import (
        Sandbox as Sandbox,
    )
    from antler.plugin_api.sandbox import (
        SandboxClosedError as SandboxClosedError,
    )
    from antler.plugin_api.sandbox import (
        SandboxError as SandboxError,
    )
    from antler.plugin_api.sandbox import (
        SandboxNotFoundError as SandboxNotFoundError,
    )
    from antler.plugin_api.sandbox import (
        SandboxProvider as SandboxProvider,
    )
    from antler.plugin_api.sandbox import (
        SearchPatternError as SearchPatternError,
    )
    from antler.plugin_api.sandbox import (
        available_sandbox_providers as available_sandbox_providers,
    )
    from antler.plugin_api.sandbox import (
        load_sandbox_provider as load_sandbox_provider,
    )
    from antler.plugin_api.skills import (
        SKILL_FILENAME as SKILL_FILENAME,
    )
    from antler.plugin_api.skills import (
        SkillError as SkillError,
    )
    from antler.plugin_api.skills import (
        parse_skill as parse_skill,
    )
    from antler.plugin_api.spec import (
        API_VERSION as API_VERSION,
    )
    from antler.plugin_api.spec import (
        ChainOverride as ChainOverride,
    )
    from antler.plugin_api.spec import (
        Ordering as Ordering,
    )
    from antler.plugin_api.spec import (
        PluginSpec as PluginSpec,
    )
    from antler.plugin_api.spec import (
        PointSpec as PointSpec,
    )
    from antler.plugin_api.spec import (
        Provenance as Provenance,
    )
    from antler.plugin_api.spec import (
        SlotSpec as SlotSpec,
    )
    from antler.plugin_api.spec import (
        StateAccess as StateAccess,
    )
    from antler.plugin_api.toolargs import (
        without_runtime_dump as without_runtime_dump,
    )
    from antler.plugin_api.tracing import (
        could_trace as could_trace,
    )
    from antler.plugin_api.uploads import (
        UploadError as UploadError,
    )
    from antler.plugin_api.uploads import (
        safe_upload_name as safe_upload_name,
    )
    from antler.plugin_api.uploads import (
        upload_names as upload_names,
    )
    from antler.plugin_api.yamlsource import (
        YamlSyntaxError as YamlSyntaxError,
    )
    from antler.plugin_api.yamlsource import (
        load_yaml as load_yaml,
    )
    from antler.plugin_api.yamlsource import (
        load_yaml_file as load_yaml_file,
    )

_MODULES: dict[str, tuple[str, ...]] = {
    # Hooks and manifests
    "antler.plugin_api.hookspecs": (
        "PROJECT", "hookimpl", "hookspec", "ChainView", "ConfigView"
    ),
    "antler.plugin_api.spec": (
        "API_VERSION", "PluginSpec", "PointSpec", "SlotSpec", "StateAccess", "Ordering",
        "ChainOverride", "Provenance"
    ),
    "antler.plugin_api.manifest": (
        "Manifest", "load_manifest", "load_manifest_text", "load_package_manifest",
        "parse_manifest", "manifest_plugin_hook", "builtin_plugin_hook"
    ),
    # Build context and services
    "antler.plugin_api.context": (
        "BuildContext", "Services", "RuntimeOptions", "ChainSecrets", "PATHS",
        "SANDBOX_PROVIDER", "SANDBOX_LOADER", "MODEL", "TITLE_MODEL", "MEMORY_MODEL",
        "MODEL_CATALOG", "MEMORY_QUEUE", "SUBAGENT_RUNNER", "MEMORY_STORE", "SKILLS",
        "SKILLS_LOADER", "CLOCK", "DEPLOYMENT", "STORE", "STORE_OPENER"
    ),
    # Run context and run keys
    "antler.contracts.runcontext": (
        "DEFAULT_USER", "RunContext", "run_context", "run_id_of", "run_key_of", "thread_id_of"
    ),
    "antler.contracts.runstore": (
        "RunKey", "RunStore", "PendingQueue", "call_then_commit", "acall_then_commit"
    ),
    # Thread paths and files
    "antler.plugin_api.paths": (
        "VIRTUAL_ROOT", "SKILLS_VIRTUAL_ROOT", "PathLayout", "ThreadPaths", "VirtualPathMapper",
        "PathEscapeError", "InvalidIdentifierError", "MissingThreadIdError", "resolve_base",
        "validate_id"
    ),
    "antler.plugin_api.uploads": (
        "UploadError", "safe_upload_name", "upload_names"
    ),
    "antler.plugin_api.toolargs": (
        "without_runtime_dump",
    ),
    # Models
    "antler.plugin_api.models": (
        "ModelSpec", "resolve_model", "side_call_model"
    ),
    "antler.plugin_api.tracing": (
        "could_trace",
    ),
    "antler.plugin_api.modelerrors": (
        "describe_provider_error", "unreachable"
    ),
    # Provider interfaces
    "antler.plugin_api.providers": (
        "Action", "AuthorizationProvider", "Decision", "GuardrailProvider", "GuardrailRequest",
        "Principal", "ProviderConfigError", "ProviderLoadError", "UnknownProviderError",
        "AuthzError", "AUTHORIZATION_PROVIDER", "AUTHORIZATION_PROVIDER_GROUP",
        "AUTHORIZATION_AUDIT_LOGGER", "GUARDRAIL_PROVIDER", "GUARDRAIL_PROVIDER_GROUP",
        "GUARDRAIL_AUDIT_LOGGER", "aevaluate", "evaluate", "audit_decision",
        "denied_tool_message", "load_authorization_provider", "load_guardrail_provider",
        "available_authorization_providers", "available_guardrail_providers",
        "principal_from_context", "resolve_authorization_provider", "tool_name"
    ),
    "antler.plugin_api.sandbox": (
        "Sandbox", "SandboxProvider", "SandboxError", "SandboxNotFoundError",
        "SandboxClosedError", "CommandResult", "CommandInterrupted", "GlobResult", "GrepResult",
        "SearchPatternError", "SANDBOX_PROVIDER_GROUP", "load_sandbox_provider",
        "available_sandbox_providers"
    ),
    # Contracts
    "antler.contracts.toolmeta": (
        "ToolMeta", "TOOL_META_KEY", "tool_meta", "with_tool_meta", "refusal", "result_meta",
        "classify_error_text", "validate_tool_meta", "is_error_payload"
    ),
    "antler.contracts.tooloutput": (
        "OUTPUT_BUDGET_SERVICE", "TOOL_OUTPUT_KEY", "TOOL_RESULTS_DIRNAME", "budgeted_output",
        "is_tool_result_path"
    ),
    "antler.contracts.stop_reason": (
        "StopReasonState", "record_stop_reason", "stop_reason_of", "describe_stop_reason"
    ),
    "antler.contracts.messages": (
        "REINSERTED_SUFFIX", "hidden_marker", "hidden_source", "is_hidden", "reinserted_from",
        "reinserted_id", "message_text", "latest_user_message", "user_text",
        "has_tool_call_intent", "strip_tool_calls", "provider_field", "provider_text",
        "message_role", "refusal_text"
    ),
    "antler.contracts.writes": (
        "WRITES_KEY", "MessageWrites", "merge_writes"
    ),
    "antler.contracts.folding": ("folds_with",),
    "antler.contracts.toolgroups": (
        "FILE_READ_TOOLS", "FILE_WRITE_TOOLS", "SANDBOX_TOOLS", "TOOL_GROUPS",
        "expand_tool_groups"
    ),
    "antler.contracts.usage": (
        "USAGE_KEY", "ATTRIBUTED_KEY", "SUBAGENT_USAGE_KEY", "add_usage", "normalize_usage",
        "usage_of", "run_usage_of", "USAGE_FIELDS"
    ),
    "antler.contracts.deferred": (
        "DEFERRED_TOOLS", "TOOL_SEARCH", "CatalogEntry", "DeferredTools", "PromotedState",
        "limit_discovery", "promoted_names", "promotion"
    ),
    "antler.contracts.durable": (
        "DELEGATIONS_KEY", "SKILL_CONTEXT_KEY", "IN_PROGRESS", "TERMINAL_STATUSES",
        "DurableState", "merge_delegations", "run_delegations"
    ),
    "antler.contracts.fallback": (
        "error_fallback_message", "error_fallback_of", "is_error_fallback"
    ),
    "antler.contracts.serverkeys": (
        "ARRIVALS_KEY", "server_owned_keys", "strip_server_owned"
    ),
    "antler.contracts.storenames": (
        "MEMORY_NAMESPACE", "PENDING_NAMESPACE", "owner_of"
    ),
    "antler.contracts.mcp": (
        "MCP_ADAPTER_PACKAGE", "is_mcp_tool"
    ),
    # History folding
    "antler.plugin_api.historyfold": (
        "HistoryFold",
    ),
    "antler.plugin_api.messagememo": (
        "MessageMemo",
    ),
    # Skills
    "antler.plugin_api.skills": (
        "SKILL_FILENAME", "SkillError", "parse_skill"
    ),
    # Commands
    "antler.plugin_api.commands": (
        "CommandError", "CommandSession", "pass_session", "config_option", "home_option",
        "json_option", "console", "print_json"
    ),
    # Errors
    "antler.errors": (
        "AntlerError", "BuildError", "ConfigError", "PluginHookError", "ReflectionError",
        "StateWriteError"
    ),
    # Input within limits
    "antler.parselimits": (
        "SourceLimitError", "max_file_bytes", "read_bounded"
    ),
    "antler.plugin_api.yamlsource": (
        "YamlSyntaxError", "load_yaml", "load_yaml_file"
    ),
    "antler.plugin_api.diagnostics": (
        "did_you_mean",
    ),
    "antler.plugin_api.reflection": (
        "instantiate", "resolve_object", "split_path"
    ),
}
"""The public names, by the module they live in."""

_RENAMED = {"expand_tool_groups": "expand", "USAGE_FIELDS": "FIELDS"}
"""Public name -> its name in its module, where the two differ."""

_SUBMODULES = {"confined": "antler.plugin_api.confined", "jsonsource": "antler.jsonsource"}
"""Public names that are modules (namespaces of helpers)."""

_EXPORTS: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "API_VERSION",
    "ARRIVALS_KEY",
    "ATTRIBUTED_KEY",
    "AUTHORIZATION_AUDIT_LOGGER",
    "AUTHORIZATION_PROVIDER",
    "AUTHORIZATION_PROVIDER_GROUP",
    "CLOCK",
    "DEFAULT_USER",
    "DEFERRED_TOOLS",
    "DELEGATIONS_KEY",
    "DEPLOYMENT",
    "FILE_READ_TOOLS",
    "FILE_WRITE_TOOLS",
    "GUARDRAIL_AUDIT_LOGGER",
    "GUARDRAIL_PROVIDER",
    "GUARDRAIL_PROVIDER_GROUP",
    "IN_PROGRESS",
    "MCP_ADAPTER_PACKAGE",
    "MEMORY_MODEL",
    "MEMORY_NAMESPACE",
    "MEMORY_QUEUE",
    "MEMORY_STORE",
    "MODEL",
    "MODEL_CATALOG",
    "OUTPUT_BUDGET_SERVICE",
    "PATHS",
    "PENDING_NAMESPACE",
    "PROJECT",
    "REINSERTED_SUFFIX",
    "SANDBOX_LOADER",
    "SANDBOX_PROVIDER",
    "SANDBOX_PROVIDER_GROUP",
    "SANDBOX_TOOLS",
    "SKILLS",
    "SKILLS_LOADER",
    "SKILLS_VIRTUAL_ROOT",
    "SKILL_CONTEXT_KEY",
    "SKILL_FILENAME",
    "STORE",
    "STORE_OPENER",
    "SUBAGENT_RUNNER",
    "SUBAGENT_USAGE_KEY",
    "TERMINAL_STATUSES",
    "TITLE_MODEL",
    "TOOL_GROUPS",
    "TOOL_META_KEY",
    "TOOL_OUTPUT_KEY",
    "TOOL_RESULTS_DIRNAME",
    "TOOL_SEARCH",
    "USAGE_FIELDS",
    "USAGE_KEY",
    "VIRTUAL_ROOT",
    "WRITES_KEY",
    "Action",
    "AntlerError",
    "AuthorizationProvider",
    "AuthzError",
    "BuildContext",
    "BuildError",
    "CatalogEntry",
    "ChainOverride",
    "ChainSecrets",
    "ChainView",
    "CommandError",
    "CommandInterrupted",
    "CommandResult",
    "CommandSession",
    "ConfigError",
    "ConfigView",
    "Decision",
    "DeferredTools",
    "DurableState",
    "GlobResult",
    "GrepResult",
    "GuardrailProvider",
    "GuardrailRequest",
    "HistoryFold",
    "InvalidIdentifierError",
    "Manifest",
    "MessageMemo",
    "MessageWrites",
    "MissingThreadIdError",
    "ModelSpec",
    "Ordering",
    "PathEscapeError",
    "PathLayout",
    "PendingQueue",
    "PluginHookError",
    "PluginSpec",
    "PointSpec",
    "Principal",
    "PromotedState",
    "Provenance",
    "ProviderConfigError",
    "ProviderLoadError",
    "ReflectionError",
    "RunContext",
    "RunKey",
    "RunStore",
    "RuntimeOptions",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "SandboxNotFoundError",
    "SandboxProvider",
    "SearchPatternError",
    "Services",
    "SkillError",
    "SlotSpec",
    "SourceLimitError",
    "StateAccess",
    "StateWriteError",
    "StopReasonState",
    "ThreadPaths",
    "ToolMeta",
    "UnknownProviderError",
    "UploadError",
    "VirtualPathMapper",
    "YamlSyntaxError",
    "acall_then_commit",
    "add_usage",
    "aevaluate",
    "audit_decision",
    "available_authorization_providers",
    "available_guardrail_providers",
    "available_sandbox_providers",
    "budgeted_output",
    "builtin_plugin_hook",
    "call_then_commit",
    "classify_error_text",
    "config_option",
    "confined",
    "console",
    "could_trace",
    "denied_tool_message",
    "describe_provider_error",
    "describe_stop_reason",
    "did_you_mean",
    "error_fallback_message",
    "error_fallback_of",
    "evaluate",
    "expand_tool_groups",
    "folds_with",
    "has_tool_call_intent",
    "hidden_marker",
    "hidden_source",
    "home_option",
    "hookimpl",
    "hookspec",
    "instantiate",
    "is_error_fallback",
    "is_error_payload",
    "is_hidden",
    "is_mcp_tool",
    "is_tool_result_path",
    "json_option",
    "jsonsource",
    "latest_user_message",
    "limit_discovery",
    "load_authorization_provider",
    "load_guardrail_provider",
    "load_manifest",
    "load_manifest_text",
    "load_package_manifest",
    "load_sandbox_provider",
    "load_yaml",
    "load_yaml_file",
    "manifest_plugin_hook",
    "max_file_bytes",
    "merge_delegations",
    "merge_writes",
    "message_role",
    "message_text",
    "normalize_usage",
    "owner_of",
    "parse_manifest",
    "parse_skill",
    "pass_session",
    "principal_from_context",
    "print_json",
    "promoted_names",
    "promotion",
    "provider_field",
    "provider_text",
    "read_bounded",
    "record_stop_reason",
    "refusal",
    "refusal_text",
    "reinserted_from",
    "reinserted_id",
    "resolve_authorization_provider",
    "resolve_base",
    "resolve_model",
    "resolve_object",
    "result_meta",
    "run_context",
    "run_delegations",
    "run_id_of",
    "run_key_of",
    "run_usage_of",
    "safe_upload_name",
    "server_owned_keys",
    "side_call_model",
    "split_path",
    "stop_reason_of",
    "strip_server_owned",
    "strip_tool_calls",
    "thread_id_of",
    "tool_meta",
    "tool_name",
    "unreachable",
    "upload_names",
    "usage_of",
    "user_text",
    "validate_id",
    "validate_tool_meta",
    "with_tool_meta",
    "without_runtime_dump",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562), then keep it on the package."""
    if name in _SUBMODULES:
        value = importlib.import_module(_SUBMODULES[name])
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), _RENAMED.get(name, name))
    else:
        raise AttributeError(f"module 'antler.plugin_api' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
