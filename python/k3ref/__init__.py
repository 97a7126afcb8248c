"""k3ref: the float64 NumPy semantic oracle for the K3 compiler.

Naive, obviously-right reference implementations of every op of the Kimi K3
text decoder (and of the Kimi Linear family it descends from), following
``/work/shared/K3-SPEC.md``.  Everything is computed in float64; nothing here
is meant to be fast.

    from k3ref import ops, model
"""

from . import ops  # noqa: F401
from . import model  # noqa: F401

__all__ = ["ops", "model"]
