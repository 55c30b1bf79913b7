"""The papers' stand-alone systems, each with its own coordinates (not a :class:`~diffmb.Model`).

* :mod:`.quaternion_lagrange` — a rigid body with spinning rotors by Lagrange's equations in
  quaternions with the multipliers eliminated (Xu et al. 2017, the UAV study);
* :mod:`.rotor_kane` — the same body by Kane's equations;
* :mod:`.maximal` — absolute (maximal) coordinates with quaternions and holonomic joints, the
  index-1 DAE with Baumgarte stabilisation (Xu & Zhong 2014);
* :mod:`.variational` — the symplectic variational step for those systems;
* :mod:`.fem` and :mod:`.modal` — Euler–Bernoulli beam elements and their reduction by
  constrained and unconstrained modes (the flexible-arm study).

Each is integrated by :func:`diffmb.simulate` through a system object of
:mod:`diffmb.systems`.
"""
