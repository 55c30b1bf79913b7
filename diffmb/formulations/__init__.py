"""The papers' stand-alone systems, each with its own coordinates (not a :class:`~diffmb.Model`).

* :mod:`.quaternion_lagrange` — a rigid body with spinning rotors by Lagrange's equations in
  quaternions with the multipliers eliminated (Wu et al. 2019, the UAV study);
* :mod:`.rotor_kane` — the same body by Kane's equations;
* :mod:`.maximal` — absolute (maximal) coordinates with quaternions and holonomic joints, the
  index-1 DAE with Baumgarte stabilisation (Xu & Zhong 2014);
* :mod:`.variational` — the symplectic variational step for those systems;
* :mod:`.fem` and :mod:`.modal` — Euler–Bernoulli beam elements and their reduction by
  constrained and unconstrained modes (the flexible-arm study).

Each is integrated by :func:`diffmb.simulate` through a system object of
:mod:`diffmb.systems`.
"""

from . import fem as fem
from . import maximal as maximal
from . import modal as modal
from . import quaternion_lagrange as quaternion_lagrange
from . import rotor_kane as rotor_kane
from . import variational as variational
