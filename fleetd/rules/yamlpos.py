"""Where, in a YAML file, a character of a scalar value is: for ``file:line:col`` errors that
point inside an expression or a template, not just at its key.

``fleetd.configbase.load_yaml`` records where keys start; this module composes the document
again (only when there is an error to report) and maps an offset in a parsed string back to
the source, for plain, quoted and block (``|``, ``>``) scalars.
"""

from __future__ import annotations

import yaml

from fleetd.configbase import Path_


def value_node(text: str, path: Path_) -> yaml.Node | None:
    """The YAML node at ``path`` (mapping keys and list indexes), or None."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    for part in path:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if 0 <= part < len(node.value) else None
        else:
            return None
        if node is None:
            return None
    return node


def locate(text: str, path: Path_, offset: int) -> tuple[int, int] | None:
    """1-based (line, col) in ``text`` of character ``offset`` of the scalar at ``path``."""
    node = value_node(text, path)
    if not isinstance(node, yaml.ScalarNode):
        return None
    start, end = node.start_mark, node.end_mark
    lines = text.splitlines()
    style = node.style
    if style in ("|", ">"):
        first = start.line + 1  # content starts on the line after the indicator
        last = end.line if end.column == 0 else end.line + 1
        segments = _segments(lines, first, min(last, len(lines)), strip_common=True)
    elif start.line == end.line:
        quoted = 1 if style in ("'", '"') else 0
        return start.line + 1, start.column + 1 + quoted + offset
    else:
        segments = _segments(lines, start.line, min(end.line + 1, len(lines)), strip_common=False)
        if segments:
            skip = start.column + (1 if style in ("'", '"') else 0)
            line0 = segments[0][0]
            segments[0] = (line0, skip, lines[line0][skip:].rstrip())
    remaining = offset
    for line_no, col, content in segments:
        if remaining <= len(content):
            return line_no + 1, col + remaining + 1
        remaining -= len(content) + 1  # the line break became one character
    if segments:
        line_no, col, content = segments[-1]
        return line_no + 1, col + len(content) + 1
    return start.line + 1, start.column + 1


def _segments(
    lines: list[str], first: int, last: int, *, strip_common: bool
) -> list[tuple[int, int, str]]:
    """(line index, column where content starts, content) for each source line."""
    chosen = [(i, lines[i]) for i in range(first, last) if i < len(lines)]
    indents = [len(s) - len(s.lstrip()) for _, s in chosen if s.strip()]
    common = min(indents) if indents else 0
    out = []
    for i, source in chosen:
        cut = min(common, len(source)) if strip_common else len(source) - len(source.lstrip())
        out.append((i, cut, source[cut:].rstrip()))
    return out
