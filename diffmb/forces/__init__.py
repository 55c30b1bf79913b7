"""Force elements that :func:`diffmb.simulate` and :func:`diffmb.forward` add to the rigid-body
law (see :mod:`diffmb.forces.elements` for the interface), and the aerodynamic laws of
:mod:`diffmb.forces.aero`."""

from .aero import BodyAerodynamics as BodyAerodynamics
from .elements import AbstractForce as AbstractForce
from .elements import AbstractStatefulForce as AbstractStatefulForce
from .elements import Actuators as Actuators
from .elements import BodyWrench as BodyWrench
from .elements import Couplings as Couplings
from .elements import FixedTendons as FixedTendons
from .elements import GeneralizedForce as GeneralizedForce
from .elements import JointDamping as JointDamping
from .elements import JointFriction as JointFriction
from .elements import JointLimits as JointLimits
from .elements import JointSpring as JointSpring
