"""The batch of contact rollouts that test_distributed.py runs in one and in two processes."""

import pathlib
import tempfile

import numpy as np

import diffmb
from diffmb.contacts import Box, Contacts, Plane
from diffmb.optim import batch_simulate

XML = """<mujoco><worldbody><body name="box"><freejoint/>
<geom type="box" size=".1 .1 .1" mass="2"/></body></worldbody></mujoco>"""


def rollouts(**kw):
    """Six boxes dropped onto a plane with random velocities, 0.5 s of the implicit step."""
    path = pathlib.Path(tempfile.mkdtemp()) / "box.xml"
    path.write_text(XML)
    model = diffmb.load_mjcf(path)
    contacts = Contacts([Box("box", (0.1, 0.1, 0.1))], Plane(), model=model, mu=0.5)
    rng = np.random.default_rng(0)
    q0 = np.tile([0.0, 0.0, 0.15, 1.0, 0.0, 0.0, 0.0], (6, 1))
    q0[:, 2] += rng.uniform(0.0, 0.1, 6)
    v0 = 0.5 * rng.normal(size=(6, 6))
    return batch_simulate(model, q0, v0, t1=0.5, dt=0.01, forces=(contacts,), solver="implicit",
                          saveat=[0.25, 0.5], **kw)
