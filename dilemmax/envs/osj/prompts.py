"""The system prompts of the OpenSocialJax games, read from package data.

Each game keeps its prompt texts as files under its own ``prompts/`` folder (``system.md`` and
the optional items such as ``role_cooperator.md``), written as ``string.Template`` texts:
``${name}`` is filled in per agent and env, everything else is what the model reads. A file's
final newline is not part of the text.
"""

from __future__ import annotations

import functools
import importlib.resources
import string


@functools.cache
def prompt_text(package: str, name: str) -> str:
    """The text of ``<package>/prompts/<name>`` (read once per process)."""
    path = importlib.resources.files(package).joinpath("prompts", name)
    return path.read_text(encoding="utf-8").removesuffix("\n")


def fill(package: str, name: str, **values) -> str:
    """The prompt file ``name`` with its ``${...}`` fields filled in (all of them: a missing
    value raises rather than leaving a field in a model's prompt)."""
    return string.Template(prompt_text(package, name)).substitute(values)
