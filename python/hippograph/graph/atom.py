"""Erlang atoms in trajectory metadata (docs/architecture.md, fingerprint).

Python has no atom type, and a plain ``str`` already maps to an Erlang binary, so
an atom needs a type of its own: ``Atom("ok")`` is encoded as the atom ``ok``
while ``"ok"`` is encoded as the binary ``<<"ok">>``. The two are deliberately
unequal and distinct dict keys, so a metadata dict can hold both, as an Erlang
map can.
"""

from __future__ import annotations

from typing import Any, Final, NoReturn, final

from ..errors import ValidationError

__all__ = ["MAX_ATOM_CHARS", "Atom"]

MAX_ATOM_CHARS: Final = 255
"""Erlang refuses atoms longer than this many characters."""


@final
class Atom:
    """An immutable, hashable Erlang atom named by a str of at most 255 characters.

    Not a ``str`` subclass: ``Atom("a") != "a"`` and the two never collide as
    dict keys. Subclassing is not supported (the encoder accepts exactly ``Atom``).
    """

    __slots__ = ("_name",)
    __match_args__ = ("name",)

    _name: str

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise ValidationError(f"atom name must be a str, got {type(name).__name__}")
        plain = str.__str__(name)  # the text itself, even for a str subclass
        if len(plain) > MAX_ATOM_CHARS:
            raise ValidationError(f"atom name has {len(plain)} characters; Erlang allows {MAX_ATOM_CHARS}")
        try:
            plain.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError("atom name is not encodable as UTF-8 (lone surrogate)") from None
        object.__setattr__(self, "_name", plain)

    @property
    def name(self) -> str:
        """The atom's text."""
        return self._name

    def __setattr__(self, attr: str, value: Any) -> NoReturn:
        raise AttributeError(f"Atom is immutable; cannot set {attr!r}")

    def __delattr__(self, attr: str) -> NoReturn:
        raise AttributeError(f"Atom is immutable; cannot delete {attr!r}")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Atom):
            return self._name == other._name
        return NotImplemented

    def __hash__(self) -> int:
        # Salted with the class so an atom and its name hash apart.
        return hash((Atom, self._name))

    def __repr__(self) -> str:
        return f"Atom({self._name!r})"

    def __reduce__(self) -> tuple[type[Atom], tuple[str]]:
        return (Atom, (self._name,))
