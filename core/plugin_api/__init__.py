"""The plugin API: what a plugin declares and how the platform finds it.

Specs (`spec`), manifests (`manifest`), the platform hooks (`hookspecs`),
discovery (`registry`), the build context a factory receives (`context`), and
the helpers that turn bad input into messages naming file, line and fix
(`diagnostics`, `yamlsource`, `reflection`). Nothing here imports LangChain.
"""
