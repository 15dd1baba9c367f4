"""Click options gathered into one record: :func:`grouped` turns the values of the options named like a frozen
dataclass's fields into one instance of it, passed to the command as a single parameter.

A click command otherwise takes one parameter per option (``sources add`` took 16); with this, it takes the
record, typed field by field.  What it does not do: declare the options (each ``@click.option`` stays where it
was, so ``--help`` and parsing are unchanged), convert or check values (click's types do that before), or
gather arguments other than the ones click passes by keyword.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any


def grouped(record: type[Any], name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator: the keyword arguments named like ``record``'s fields become ``name=record(...)``.

    Put it under the ``@click.option`` lines and ``@click.pass_obj`` (it wraps the function those decorate);
    every field of ``record`` must be the destination name of one option or argument.
    """
    if not dataclasses.is_dataclass(record):
        raise TypeError(f"{record!r} is not a dataclass")
    fields = frozenset(f.name for f in dataclasses.fields(record))

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def gathered(*args: Any, **kwargs: Any) -> None:
            values = {key: kwargs.pop(key) for key in fields}
            command(*args, **kwargs, **{name: record(**values)})

        return gathered

    return decorate


__all__ = ["grouped"]
