"""``special``: scipy.special's functions, with scipy imported at the first call of one.

Importing scipy.special takes 150-200 ms (its array-API layer makes numpy import numpy.f2py,
numpy.testing, ...): that was half of the first session's creation time, paid by every model
although only Erf, some activations, LSTM/GRU gates and PROBIT use it. Kernel modules read
``special.erf`` at import to register kernels; what they get is a small callable that looks
the real function up once, at its first call, and then calls it directly.
"""

from __future__ import annotations

import importlib
from typing import Any


class _Function:
    __slots__ = ("name", "function")

    def __init__(self, name: str):
        self.name = name
        self.function: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        function = self.function
        if function is None:
            function = self.function = getattr(importlib.import_module("scipy.special"), self.name)
        return function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<scipy.special.{self.name}, imported at its first call>"


class _Special:
    """Attribute ``name`` is a ``_Function`` for scipy.special's ``name`` (made once)."""

    def __getattr__(self, name: str) -> _Function:
        if name.startswith("_"):
            raise AttributeError(name)
        function = _Function(name)
        setattr(self, name, function)  # later lookups are plain attribute reads
        return function


special = _Special()
