"""Griffe extension for the API reference: render our reST-flavoured docstrings as Markdown.

The package's docstrings are written for ``doctest`` and Sphinx-like reading: examples are
bare ``>>>`` blocks and cross references are roles such as ``:class:`~x.Y```. Markdown
would turn ``>>>`` into nested block quotes and print the roles verbatim, so before
mkdocstrings renders a docstring this extension

* wraps every doctest block (a ``>>>`` line up to the next blank line) in a ``pycon``
  code fence, and
* turns ``:role:`~a.b.C``` into ``C`` and ``:role:`a.b.C``` into ``a.b.C`` (inline code),
* and shows reST simple tables (``=====  =====`` borders) as preformatted text.

It only changes what the documentation shows; the docstrings (and their doctests, run by
pytest) stay as they are. Loaded from mkdocs.yml by path.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_BORDER = re.compile(r"^\s*=+(?:\s+=+)+\s*$")
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def rst_to_markdown(text: str) -> str:
    """Fence doctest blocks and flatten reST roles.

    >>> rst_to_markdown("==  ==\\na   b\\n==  ==\\nx   y\\n==  ==").splitlines()[0]
    '```text'
    >>> prompt = ">" * 3  # spelled out so that doctest does not run the inner example
    >>> rst_to_markdown(f"See :class:`~a.B` or :func:`a.f`.\\n\\n{prompt} 1 + 1\\n2\\n\\nEnd.")
    'See `B` or `a.f`.\\n\\n```pycon\\n>>> 1 + 1\\n2\\n```\\n\\nEnd.'
    """
    text = _ROLE.sub(_role, text)
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(f"{indent}```")
            continue
        if _BORDER.match(line):
            # A simple table: top border, header, border, rows, bottom border.
            borders = [j for j in range(i, len(lines)) if _BORDER.match(lines[j])][:3]
            if len(borders) == 3:
                indent = line[: len(line) - len(line.lstrip())]
                out += [f"{indent}```text", *lines[i : borders[2] + 1], f"{indent}```"]
                i = borders[2] + 1
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


class RstDocstrings(griffe.Extension):
    """Apply :func:`rst_to_markdown` to every docstring once the object tree is built."""

    def __init__(self) -> None:
        super().__init__()
        self._done: set[int] = set()  # a docstring shared by aliases is converted once

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        doc = obj.docstring
        if doc is not None and id(doc) not in self._done:
            self._done.add(id(doc))
            doc.value = rst_to_markdown(doc.value)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """The package itself (its ``__init__`` docstring) is not passed to on_object."""
        self.on_object(obj=pkg)
