"""Command-line flags generated from a pydantic model's fields, over an optional config file.

Each field ``some_name`` becomes ``--some-name`` with the field's description as its help: a
bool field a ``--x/--no-x`` pair, a ``Literal`` field a choice, any other field its own type
(``Flag(parse)`` in the field's ``Annotated`` metadata overrides the parsing). ``--config FILE``
(JSON, or TOML by its ``.toml`` suffix) gives a base that the flags override; the model then
validates the result, and whatever it refuses is a usage error (exit 2) naming the flag.
"""

from __future__ import annotations

import argparse
import json
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import tomllib
from pydantic import BaseModel, ValidationError

__all__ = ["Flag", "add_model_flags", "parse_model", "usage_message"]

Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class Flag:
    """``Annotated`` metadata: how the flag's text becomes the field's value."""

    parse: Callable[[str], Any]


def _flag_kwargs(annotation: Any, metadata: Sequence[Any]) -> dict[str, Any]:
    """argparse keywords for a field: an action for bools, choices or a type otherwise."""
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    custom = next((m for m in metadata if isinstance(m, Flag)), None)
    if custom is not None:
        return {"type": custom.parse}
    if get_origin(annotation) in (Union, types.UnionType):  # X | None: the flag parses an X
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is Literal:
        return {"choices": get_args(annotation)}
    return {"type": annotation}


def add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """``--config FILE`` and one flag per field of ``model``; a flag not given stays unset."""
    parser.add_argument("--config", type=Path, default=None,
                        help="a JSON or TOML file of these settings (field names with "
                        "underscores); the flags given override it")
    for name, field in model.model_fields.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=argparse.SUPPRESS,
                            help=field.description,
                            **_flag_kwargs(field.annotation, field.metadata))


def _read_config(path: Path) -> dict[str, Any]:
    text = path.read_text()
    values = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    if not isinstance(values, dict):
        raise ValueError("expected a table of settings")
    return values


def usage_message(error: ValidationError) -> str:
    """The first error, as a flag's: a validator's own message, else ``--flag: reason``."""
    first = error.errors()[0]
    if first["type"] == "value_error" and "error" in first.get("ctx", {}):
        return str(first["ctx"]["error"])
    where = ".".join(str(part) for part in first["loc"])
    return f"--{where.replace('_', '-')}: {first['msg']}"


def parse_model(parser: argparse.ArgumentParser, model: type[Model],
                argv: Sequence[str] | None = None) -> Model:
    """The model from ``--config`` and the flags given (flags win); usage errors exit 2."""
    given = vars(parser.parse_args(argv))
    path = given.pop("config")
    base: dict[str, Any] = {}
    if path is not None:
        try:
            base = _read_config(path)
        except (OSError, ValueError) as e:  # tomllib's and json's decode errors are ValueErrors
            parser.error(f"--config {path}: {e}")
    try:
        return model.model_validate(base | given)
    except ValidationError as e:
        parser.error(usage_message(e))
