"""Rendering typed values into the text formats the lab feeds to tools.

``ip -batch`` and ``tc -batch`` split a line into tokens on whitespace and give
quotes, ``#`` and backslashes a meaning; FRR's configuration reader splits on
whitespace and treats ``!`` and ``#`` as comments. Every token the lab writes
into such a line goes through :func:`token`, which refuses anything outside a
plain character set, so no value can add a line, a token or a comment, whatever
validation let through. Values reach here only from the typed topology
(:mod:`nslab.model.fields`), so a refusal is a bug in the lab, and says so.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, List

from ..errors import LabError

#: Characters of a plain token: names, numbers, addresses (``:``, ``/``), tc
#: handles (``1:``), percentages, MACs.
TOKEN_RE = re.compile(r"^[A-Za-z0-9_.:/%+,-]+$")


class RenderError(LabError):
    """A value that cannot be written as one plain token (a bug: validation
    should have refused it first)."""


def token(value: Any) -> str:
    """``value`` as one plain token, or :class:`RenderError`."""
    text = str(value)
    if not TOKEN_RE.fullmatch(text) or text.startswith("-") and not _is_number(text):
        raise RenderError(f"refusing to render {text!r} as a command token")
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def line(*tokens: Any) -> str:
    """One batch line from ``tokens`` (each checked by :func:`token`)."""
    if not tokens:
        raise RenderError("refusing to render an empty line")
    return " ".join(token(t) for t in tokens)


def text(lines: Iterable[str]) -> str:
    """Lines joined for a batch file; every line must already be rendered."""
    out: List[str] = []
    for ln in lines:
        if "\n" in ln or "\r" in ln:
            raise RenderError(f"refusing a batch line with a line break: {ln!r}")
        out.append(ln)
    return "\n".join(out) + "\n" if out else ""
