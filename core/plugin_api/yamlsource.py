"""YAML loading that remembers where every value came from.

Operators and plugin authors need errors that point at a line and column. The
YAML is composed into nodes first (still `safe_load` semantics: no tags that
construct objects), then converted to plain Python while a side table records
the start mark of every mapping key and value by its path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
    """The text is not YAML, or uses a construct `safe_load` refuses."""


def load_yaml(text: str, source: str = "<string>") -> YamlDocument:
    """Parse `text` safely; raise `YamlSyntaxError` with file:line:column on failure."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = exc.problem or str(exc)
        raise YamlSyntaxError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"{source}: invalid YAML: {exc}") from None
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


def load_yaml_file(path: str | Path) -> YamlDocument:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise YamlSyntaxError(f"{path}: cannot read: {exc.strerror or exc}") from None
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
        raise YamlSyntaxError(
            f"{_location(doc.source, node)}: the tag {node.tag!r} is not allowed (only plain "
            "YAML values are allowed)"
        )
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise YamlSyntaxError(
                    f"{_location(doc.source, key_node)}: YAML merge keys ('<<') are not "
                    "supported here; write the keys out"
                )
            key = _scalar(key_node, doc, loader)
            if isinstance(key, (list, dict)):
                raise YamlSyntaxError(f"{_location(doc.source, key_node)}: keys must be scalars")
            if key in result:
                raise YamlSyntaxError(
                    f"{_location(doc.source, key_node)}: duplicate key {key!r} (the second "
                    "would silently replace the first; keep one)"
                )
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
        raise YamlSyntaxError(
            f"{_location(doc.source, node)}: {exc.problem} (only plain YAML values are allowed)"
        ) from None
