"""A griffe extension for the docs site: Sphinx roles in docstrings render as code.

Some docstrings still name objects with reStructuredText roles (``:meth:`resume```), which
Markdown shows verbatim; the site shows the name as code instead (``resume``).  mkdocs.yml
loads this file; nothing else imports it.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|data|attr|mod|exc|obj):`(~?)([^`]+)`")


def as_code(match: re.Match[str]) -> str:
    # "~pkg.mod.Name" is Sphinx for "show only Name".
    name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
    return f"`{name}`"


class SphinxRoles(griffe.Extension):
    """Rewrites each role in a docstring as inline code when griffe loads the object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(as_code, obj.docstring.value)
