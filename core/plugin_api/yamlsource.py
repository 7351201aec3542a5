"""YAML loading that remembers where every value came from.

Operators and plugin authors need errors that point at a line and column. The
YAML is composed into nodes first (still `safe_load` semantics: no tags that
construct objects), then converted to plain Python while a side table records
the start mark of every mapping key and value by its path.

Composition is bounded (`parselimits`): nesting deeper than `MAX_DEPTH`, more
than `MAX_NODES` values, aliases that stand for more than `MAX_ALIAS_NODES`
values together, and an alias inside the collection it names are refused with
the line and column where the limit was passed, before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from antler.parselimits import (
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    MAX_NODES,
    SourceLimitError,
    read_bounded,
)

PathKey = tuple[str | int, ...]


@dataclass(frozen=True)
class Location:
    """A 1-based line and column in a named source."""

    source: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.column}"


@dataclass
class YamlDocument:
    """Plain data plus the location of each path inside it."""

    data: Any
    source: str
    marks: dict[PathKey, Location] = field(default_factory=dict)

    def locate(self, path: PathKey) -> Location:
        """The location of `path`, or of its nearest ancestor that has one."""
        probe = tuple(path)
        while probe:
            if probe in self.marks:
                return self.marks[probe]
            probe = probe[:-1]
        return self.marks.get((), Location(self.source, 1, 1))


class YamlSyntaxError(ValueError):
    """The text is not YAML, passes a parse limit, or uses a construct `safe_load` refuses.

    `line` and `column` (1-based, 0 when unknown) locate the problem in the parsed text;
    `problem` is the message without the location."""

    def __init__(self, message: str, *, line: int = 0, column: int = 0,
                 problem: str = "") -> None:
        super().__init__(message)
        self.line, self.column, self.problem = line, column, problem or message


class YamlLimitError(yaml.MarkedYAMLError):
    """Composition passed one of the parse limits (at `problem_mark`)."""


class _PythonEvents(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    """PyYAML's own event parser (used when libyaml is not installed)."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)


try:
    from yaml._yaml import CParser as _Events
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _Events = _PythonEvents  # type: ignore[assignment,misc]


class BoundedLoader(yaml.composer.Composer, _Events, yaml.constructor.SafeConstructor,
                    yaml.resolver.Resolver):
    """A safe loader whose composer counts depth, values and what aliases stand for.

    Events come from libyaml where it is installed (four times faster than PyYAML's
    own parser); the nodes are composed here. Each composed node adds one value; an
    alias adds the values of the node it names (recorded when that node was finished),
    so the count is the size of the document as it would be built, known before
    anything is built."""

    def __init__(self, stream: str, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES,
                 max_alias_nodes: int = MAX_ALIAS_NODES) -> None:
        _Events.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self.max_depth, self.max_nodes, self.max_alias_nodes = \
            max_depth, max_nodes, max_alias_nodes
        self._depth = self._values = self._alias_values = 0
        self._anchored_sizes: dict[int, int] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> Any:
        event: Any = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:
                self._count_alias(event, target)
            return super().compose_node(parent, index)
        collection = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if collection:
            self._depth += 1
            if self._depth > self.max_depth:
                raise _limit(event, f"nested deeper than {self.max_depth} levels of mappings "
                             "and lists; flatten the structure")
        before = self._values
        self._count(1, event)
        node = super().compose_node(parent, index)
        if collection:
            self._depth -= 1
        if event.anchor is not None:
            self._anchored_sizes[id(node)] = self._values - before
        return node

    def _count_alias(self, event: Any, target: yaml.Node) -> None:
        size = self._anchored_sizes.get(id(target))
        if size is None:
            raise _limit(event, f"the alias *{event.anchor} is inside the value it names (a "
                         "value that contains itself); write the value out")
        self._alias_values += size
        if self._alias_values > self.max_alias_nodes:
            raise _limit(event, f"aliases here stand for more than {self.max_alias_nodes:,} "
                         "values in all (nested aliases multiply); write the repeated values "
                         "out or use fewer aliases")
        self._count(size, event)

    def _count(self, values: int, event: Any) -> None:
        self._values += values
        if self._values > self.max_nodes:
            raise _limit(event, f"more than {self.max_nodes:,} values in one document (aliases "
                         "counted as what they stand for); split the file")


def _limit(event: Any, problem: str) -> YamlLimitError:
    return YamlLimitError(None, None, problem, event.start_mark)


def load_yaml(text: str, source: str = "<string>") -> YamlDocument:
    """Parse `text` safely within the parse limits; raise `YamlSyntaxError` with
    file:line:column on failure."""
    composer = BoundedLoader(text)
    try:
        node = composer.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or str(exc)
        if mark is None:
            raise YamlSyntaxError(f"{source}: invalid YAML: {problem}",
                                  problem=problem) from None
        what = "" if isinstance(exc, YamlLimitError) else "invalid YAML: "
        problem += _syntax_hint(problem, text, mark.index)
        raise YamlSyntaxError(f"{source}:{mark.line + 1}:{mark.column + 1}: {what}{problem}",
                              line=mark.line + 1, column=mark.column + 1,
                              problem=f"{what}{problem}") from None
    except yaml.reader.ReaderError as exc:
        raise _reader_error(exc, text, source) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"{source}: invalid YAML: {exc}", problem=str(exc)) from None
    finally:
        composer.dispose()
    doc = YamlDocument(data=None, source=source)
    if node is None:
        return doc
    doc.marks[()] = _location(source, node)
    loader = yaml.SafeLoader("")
    try:
        doc.data = _convert(node, (), doc, loader)
    finally:
        loader.dispose()
    return doc


def _syntax_hint(problem: str, text: str, index: int) -> str:
    """How to fix the common YAML mistakes PyYAML names only by symptom ('' for others)."""
    if "nesting depth" in problem:  # libyaml's own bound, found before the composer's
        return f"; flatten the structure (up to {MAX_DEPTH} levels)"
    if text[index:index + 1] == "\t":
        return "; YAML indents with spaces, never tabs: replace the tab with spaces"
    if "another document" in problem:
        return ("; the file holds one YAML document: remove this `---` and what follows, or "
                "merge it into the first")
    return ""


def _reader_error(exc: yaml.reader.ReaderError, text: str, source: str) -> YamlSyntaxError:
    """A character YAML does not allow (a NUL, another control character), at its line."""
    before = text[:exc.position]
    line = before.count("\n") + 1
    column = exc.position - (before.rfind("\n") + 1) + 1
    code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
    problem = (f"invalid YAML: the character U+{code:04X} (a control character) is not allowed "
               "in a YAML file; remove it, or write it as an escape inside double quotes "
               f'("\\x{code:02x}")' if code < 0x100 else
               f"invalid YAML: the character U+{code:04X} is not allowed in a YAML file; "
               "remove it")
    return YamlSyntaxError(f"{source}:{line}:{column}: {problem}", line=line, column=column,
                           problem=problem)


def load_yaml_file(path: str | Path, max_bytes: int | None = None) -> YamlDocument:
    """`load_yaml` of the file at `path`, read within its size limit (`read_bounded`)."""
    try:
        text = read_bounded(Path(path), max_bytes)
    except SourceLimitError as exc:
        raise YamlSyntaxError(str(exc), line=1, column=1) from None
    return load_yaml(text, str(path))


def _location(source: str, node: yaml.Node) -> Location:
    return Location(source, node.start_mark.line + 1, node.start_mark.column + 1)


_PLAIN_COLLECTION_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


def _convert(
    node: yaml.Node, path: PathKey, doc: YamlDocument, loader: yaml.SafeLoader
) -> Any:
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and (
            node.tag not in _PLAIN_COLLECTION_TAGS):
        # Collections are converted here, not by the loader, so their tags must be
        # checked here: `!!python/object/apply:os.system [...]` must not pass as a list.
        raise _refused(node, doc, f"the tag {node.tag!r} is not allowed (only plain YAML "
                       "values are allowed)")
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _refused(key_node, doc, "YAML merge keys ('<<') are not supported "
                               "here; write the keys out")
            key = _scalar(key_node, doc, loader)
            if isinstance(key, (list, dict)):
                raise _refused(key_node, doc, "keys must be scalars")
            if key in result:
                raise _refused(key_node, doc, f"duplicate key {key!r} (the second would "
                               "silently replace the first; keep one)")
            child = (*path, key)
            doc.marks[child] = _location(doc.source, key_node)
            result[key] = _convert(value_node, child, doc, loader)
        return result
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            child = (*path, index)
            doc.marks[child] = _location(doc.source, item)
            items.append(_convert(item, child, doc, loader))
        return items
    return _scalar(node, doc, loader)


def _scalar(node: yaml.Node, doc: YamlDocument, loader: yaml.SafeLoader) -> Any:
    try:
        return loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        raise _refused(node, doc, f"{exc.problem} (only plain YAML values are allowed)") \
            from None
    except (ValueError, OverflowError) as exc:  # `2024-13-45`, `!!int x`: looks typed, is not
        kind = node.tag.rsplit(":", 1)[-1]
        raise _refused(node, doc, f"{node.value!r} is not a valid {kind} ({exc}); correct it, "
                       "or quote it to keep it as text") from None


def _refused(node: yaml.Node, doc: YamlDocument, problem: str) -> YamlSyntaxError:
    where = _location(doc.source, node)
    return YamlSyntaxError(f"{where}: {problem}", line=where.line, column=where.column,
                           problem=problem)
