"""Error messages about topology (and study) input: the field a problem is in,
written as a path (``nodes.h1.routes.0``), and one line for the first error
pydantic found, with the keys a model allows when a key is unknown."""
from __future__ import annotations

from types import UnionType
from typing import Any, Dict, List, Tuple, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from typing_extensions import Annotated

from ..errors import TopologyError


def field_path(loc: Tuple[Any, ...]) -> str:
    """``("nodes", "h1", "sysctls", "net.x")`` -> ``nodes.h1.sysctls['net.x']``."""
    out = ""
    for p in loc:
        if isinstance(p, str) and "." in p:
            out += f"[{p!r}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def fail(loc: Tuple[Any, ...], message: str) -> TopologyError:
    """A :class:`TopologyError` about the field at ``loc``, which its message names first."""
    return TopologyError(f"{field_path(loc)}: {message}", loc)


def loc_path(loc: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """A pydantic error location without pydantic's own markers (``function-before[...]``)."""
    return tuple(p for p in loc if isinstance(p, int) or (isinstance(p, str) and "[" not in p
                                                              and p not in ("tagged-union",)))


def explain(exc: ValidationError, where: Tuple[Any, ...] = (), root: Any = None,
            what: str = "") -> str:
    """One line for the first error of ``exc``: ``field.path: [what: ]message``.

    ``where`` is the location of the validated value in a topology
    (``("nodes", "h1")``), ``root`` its model (for the list of allowed keys),
    ``what`` a short description put before the message.
    """
    err = exc.errors(include_url=False)[0]
    loc = loc_path(tuple(err.get("loc", ())))
    msg = str(err.get("msg", "invalid"))
    for noise in ("Value error, ", "Assertion failed, "):
        if msg.startswith(noise):
            msg = msg[len(noise):]
    kind = err.get("type")
    if kind == "extra_forbidden" and loc:
        model = model_at(root, loc[:-1])
        msg = f"unknown key {loc[-1]!r}"
        if model is not None:
            msg += f" (allowed: {', '.join(_keys(model))})"
        loc = loc[:-1]
    elif kind == "missing" and loc:
        msg = f"{loc[-1]!r} is required"
    elif kind == "literal_error":
        msg = f"{err.get('input')!r} is not one of {err.get('ctx', {}).get('expected', '')}"
    field = field_path(tuple(where) + loc)
    return ": ".join(p for p in (field, what, msg) if p)


def _keys(model: Any) -> List[str]:
    return [f.alias or k for k, f in model.model_fields.items()]


def model_at(root: Any, loc: Tuple[Any, ...]) -> Any:
    """The model found at ``loc`` under the model ``root`` (None if ``loc``
    leads to no model), read from the models' own field types: a field whose
    type is a model leads into it; a list or a mapping of models takes one
    more step (the index or the key)."""
    model, i = root, 0
    while model is not None and i < len(loc):
        fields = getattr(model, "model_fields", None)
        part = loc[i]
        if not isinstance(fields, dict) or not isinstance(part, str):
            return None
        field = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        if field is None:
            return None
        model, steps = _inner_model(field.annotation)
        i += 1 + steps
    return model if i == len(loc) else None  # not past a list's index or a mapping's key


def _inner_model(annotation: Any) -> Tuple[Any, int]:
    """The model a field's type holds, and the steps a location takes to
    reach it: ``(Node, 1)`` for ``Dict[NodeName, Node]`` (the key),
    ``(Route, 1)`` for ``List[Route]`` (the index), ``(BgpOptions, 0)`` for
    ``Optional[BgpOptions]``; ``(None, 0)`` for a type that holds none."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, 0
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _inner_model(args[0])
    if origin in (list, List, tuple, set, frozenset):
        inner, steps = _inner_model(args[0]) if args else (None, 0)
        return inner, steps + 1 if inner is not None else 0
    if origin in (dict, Dict):
        inner, steps = _inner_model(args[1]) if len(args) == 2 else (None, 0)
        return inner, steps + 1 if inner is not None else 0
    if origin is Union or origin is UnionType:
        for arm in args:
            inner, steps = _inner_model(arm)
            if inner is not None:
                return inner, steps
    return None, 0
