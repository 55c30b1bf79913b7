"""The scene the implicit contact steps' tests share: a 2 kg cube of half-size 0.1 m on a
compliant floor with the default mass-normalised springs (four corners carrying it)."""

import jax.numpy as jnp
import numpy as np

import diffmb
from diffmb.contacts import Box, Contacts, Plane, soft_contact_params

G = 9.81
H = 0.1
M = 2.0
BODY = """<mujoco><option gravity="0 0 -9.81"/><worldbody><body name="box"><freejoint/>
<geom type="box" size="{h} {h} {h}" mass="{m}" contype="0" conaffinity="0"/></body>
</worldbody></mujoco>"""


def box_model(tmp_path_factory):
    """The cube's model, from its MJCF written under pytest's ``tmp_path_factory``."""
    p = tmp_path_factory.mktemp("box") / "box.xml"
    p.write_text(BODY.format(h=H, m=M))
    return diffmb.load_mjcf(p)


def contacts(model, mu=0.5, terrain=None, **kw):
    return Contacts([Box("box", (H, H, H), name="cube")], terrain or Plane(), model=model, mu=mu,
                    **kw)


def corner_stiffness():
    """The default stiffness of each of the four corners' springs."""
    return float(soft_contact_params(M, n_active=4)[0])


def rest_q(alpha=0.0, k=None):
    """The cube at rest on a floor tilted by ``alpha`` about y, each corner m g cos α / (4 k)
    deep."""
    n = np.array([-np.sin(alpha), 0.0, np.cos(alpha)])
    delta0 = M * G * np.cos(alpha) / 4 / (k or corner_stiffness())
    c = (H - delta0) * n
    return jnp.concatenate([jnp.asarray(c), jnp.array([np.cos(-alpha / 2), 0.0,
                                                       np.sin(-alpha / 2), 0.0])])
