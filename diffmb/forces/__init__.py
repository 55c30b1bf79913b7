"""Force elements that :func:`diffmb.simulate` and :func:`diffmb.forward` add to the rigid-body
law (see :mod:`diffmb.forces.elements` for the interface), and the aerodynamic laws of
:mod:`diffmb.forces.aero`; hydrodynamics (MuJoCo's fluid models, buoyancy, drag, currents and
Lamb's added-mass coefficients) in :mod:`diffmb.forces.hydro`."""

from .aero import BodyAerodynamics as BodyAerodynamics
from .elements import AbstractForce as AbstractForce
from .elements import AbstractStatefulForce as AbstractStatefulForce
from .elements import ActivatedActuators as ActivatedActuators
from .elements import Actuators as Actuators
from .elements import BodyWrench as BodyWrench
from .elements import Couplings as Couplings
from .elements import FixedTendons as FixedTendons
from .elements import GeneralizedForce as GeneralizedForce
from .elements import GravityCompensation as GravityCompensation
from .elements import JointDamping as JointDamping
from .elements import JointFriction as JointFriction
from .elements import JointLimits as JointLimits
from .elements import JointSpring as JointSpring
from .elements import SpatialTendons as SpatialTendons
from .equality import Equalities as Equalities
from .equality import solve_together as solve_together
from .hydro import Hydrodynamics as Hydrodynamics
from .hydro import MujocoEllipsoidFluid as MujocoEllipsoidFluid
from .hydro import MujocoInertiaBoxFluid as MujocoInertiaBoxFluid
from .hydro import ellipsoid_added_mass as ellipsoid_added_mass
from .hydro import lamb_k_factors as lamb_k_factors
from .unilateral import AbstractUnilateral as AbstractUnilateral
from .unilateral import UnilateralRows as UnilateralRows
from .unilateral import solve_lcp as solve_lcp
