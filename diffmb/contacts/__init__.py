"""Contacts: terrains, contact geometry on bodies, compliant contact laws, and the force element.

* :mod:`~diffmb.contacts.terrain`: :class:`Plane`, :class:`HeightField`, :func:`rough_terrain`;
* :mod:`~diffmb.contacts.geometry`: :class:`Point`, :class:`Sphere`, :class:`Capsule`,
  :class:`Box`, :class:`Cylinder`, :class:`Ellipsoid`, :class:`ConvexMesh` (signed distances,
  fixed numbers of candidate points), :class:`PosedGeom` (a geom placed in the world, which
  stands where a terrain does);
* :mod:`~diffmb.contacts.law`: Hunt–Crossley / linear normal laws, regularised Coulomb and
  spring–damper stiction friction;
* :mod:`~diffmb.contacts.element`: :class:`Contacts` (stateful, stiction) and
  :class:`CoulombContacts` (stateless) force elements holding pairs of a geom and a terrain or
  another geom, :func:`soft_contact_params`, :func:`effective_mass`, :func:`contact_forces`;
* :mod:`~diffmb.contacts.terramechanics`: :class:`WheelSoil` (compliant wheel–soil forces);
  :mod:`~diffmb.contacts.unilateral`: :class:`UnilateralWheelSoil` (the wheel–ground contact
  as a unilateral constraint, its traction proportional to the normal force).

Example: a box on the ground, simulated with the default solver::

    box = diffmb.load_mjcf(path)                    # one free body "box"
    c = Contacts([Box("box", (0.1, 0.1, 0.1))], Plane(), model=box, mu=0.6)
    traj = diffmb.simulate(box, q0, v0, t1=1.0, dt=1e-3, forces=(c,))
    res = contact_forces(box, traj, (c,))           # res.fn (ns, 8), res.point (ns, 8, 3)

A ball on the box and on the ground, one element (pair i: ``geoms[i]`` with ``others[i]``)::

    floor, box, ball = Plane(), Box("box", (0.1, 0.1, 0.1)), Sphere("ball", 0.05)
    c = Contacts([box, ball, ball], [floor, floor, box], model=model)
"""

from . import law as law
from . import terramechanics as terramechanics
from .element import MAX_INITIAL_PENETRATION as MAX_INITIAL_PENETRATION
from .element import AbstractContacts as AbstractContacts
from .element import AbstractGroundForce as AbstractGroundForce
from .element import ContactResult as ContactResult
from .element import Contacts as Contacts
from .element import CoulombContacts as CoulombContacts
from .element import backward_smoothed as backward_smoothed
from .element import contact_forces as contact_forces
from .element import effective_mass as effective_mass
from .element import soft_contact_params as soft_contact_params
from .geometry import AbstractGeom as AbstractGeom
from .geometry import Box as Box
from .geometry import Candidates as Candidates
from .geometry import Capsule as Capsule
from .geometry import ConvexMesh as ConvexMesh
from .geometry import Cylinder as Cylinder
from .geometry import Ellipsoid as Ellipsoid
from .geometry import Point as Point
from .geometry import PosedGeom as PosedGeom
from .geometry import Sphere as Sphere
from .geometry import candidates as candidates
from .law import hunt_crossley as hunt_crossley
from .law import regularised_coulomb as regularised_coulomb
from .law import spring_damper as spring_damper
from .law import stiction as stiction
from .terrain import NO_GROUND as NO_GROUND
from .terrain import AbstractTerrain as AbstractTerrain
from .terrain import HeightField as HeightField
from .terrain import Plane as Plane
from .terrain import rough_terrain as rough_terrain
from .terramechanics import SOILS as SOILS
from .terramechanics import Soil as Soil
from .terramechanics import Wheel as Wheel
from .terramechanics import WheelSoil as WheelSoil
from .unilateral import UnilateralWheelSoil as UnilateralWheelSoil
