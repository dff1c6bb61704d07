"""Strict JSON for torchsim's input files (model configs, routing files): a key given twice and a number too long
for Python's int() are errors naming the field, where `json.loads` keeps the last key silently and fails on the
number with a message that names neither the file nor the field."""

from __future__ import annotations

import json
from typing import Any


def loads_fields(text: str) -> Any:
    """`json.loads(text)` with the checks above (raises FieldError, json.JSONDecodeError or RecursionError).

    >>> loads_fields('{"a": 1, "a": 2}')
    Traceback (most recent call last):
    ...
    torchsim.models.jsonfile.FieldError: field 'a' is given twice (1, then 2); keep one
    """
    return json.loads(text, object_pairs_hook=_fields, parse_int=_int)


class FieldError(ValueError):
    """A JSON field that JSON allows but no reader can agree on (a repeated key, a 5000-digit number)."""


class _LongInt:
    """An integer literal too long for int() (Python's int_max_str_digits): kept so the field can be named."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _int(text: str) -> int | _LongInt:
    try:
        return int(text)
    except ValueError:  # over sys.get_int_max_str_digits() digits
        return _LongInt(len(text.lstrip("-")))


def _holds_long_int(value: Any) -> _LongInt | None:
    """The too-long integer in a field's value (nested lists; nested objects were checked by their own hook)."""
    if isinstance(value, _LongInt):
        return value
    for item in value if isinstance(value, list) else ():
        if (found := _holds_long_int(item)) is not None:
            return found
    return None


def _fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook for input files: a key given twice is refused (json keeps the last silently, other
    readers the first, so which value the checkpoint means is unknown), and so is a number too long to read."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise FieldError(f"field {key!r} is given twice ({json.dumps(data[key])[:30]}, then "
                             f"{json.dumps(value, default=lambda _: '...')[:30]}); keep one")
        if (long := _holds_long_int(value)) is not None:
            raise FieldError(f"field {key!r}: number too long ({long.digits} digits; the sizes, counts and ids "
                             "of a model config or routing file are integers of a few digits)")
        data[key] = value
    return data


def shown(value: object, limit: int = 60) -> str:
    """`value` quoted for a one-line message, cut to `limit` characters ("'xxx...' (100,000 characters)")."""
    text = str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"
