"""MuJoCo's soft contact against diffmb's contact element, phase by phase, on a 0.1 m, 1 kg cube
(μ = 0.4, solref (T, ζ) from the command line, default solimp, elliptic cone, 2 ms):

* landing: dropped flat from 0.1 m; contact time, deepest penetration, rebound height;
* rest: penetration at the end of the drop;
* sliding: set sliding at 1 m/s from rest; distance to stop.

diffmb runs the file's contact element (``mjcf_forces``) with the implicit contact step, which
in flight is MuJoCo's semi-implicit Euler. Run: ``python experiments/contact_phases.py 0.02 0.5``
(docs/identification.md, "Through contact").
"""

import sys

import jax.numpy as jnp
import mujoco
import numpy as np

import diffmb
from diffmb.io.mjcf import mjcf_forces

DT, MU, HALF = 0.002, 0.4, 0.05


def cube(T: float, zeta: float) -> str:
    sr = f'solref="{T} {zeta}"'
    return f"""<mujoco><option timestep="{DT}" cone="elliptic"/><worldbody>
  <geom name="floor" type="plane" size="5 5 0.1" friction="{MU}" {sr}/>
  <body name="cube" pos="0 0 0.3"><freejoint name="root"/>
    <geom name="cube" type="box" size="{HALF} {HALF} {HALF}" mass="1" friction="{MU}" {sr}/>
  </body></worldbody></mujoco>"""


def both(path, q0, v0, n):
    """z, x of MuJoCo's and diffmb's runs from (q0, v0) over n steps."""
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = q0, v0
    q = [d.qpos.copy()]
    for _ in range(n):
        mujoco.mj_step(m, d)
        q.append(d.qpos.copy())
    tr = diffmb.simulate(diffmb.load_mjcf(path), jnp.asarray(q0), jnp.asarray(v0), t1=n * DT,
                         dt=DT, forces=mjcf_forces(path), solver="implicit")
    return {"mujoco": np.array(q), "diffmb": np.asarray(tr.q)}


def landing(z):
    """(contact time [s], rebound height [m], deepest penetration [m]) of the first landing."""
    first = int(np.argmax(z < HALF))
    after = z[first:] >= HALF
    end = first + int(np.argmax(after)) if after.any() else z.size
    rebound = z[end:].max() - HALF if end < z.size else 0.0
    return (end - first) * DT, rebound, HALF - z[first:end].min()


def main(T: float = 0.02, zeta: float = 0.5, path="contact_phases_cube.xml") -> None:
    with open(path, "w") as f:
        f.write(cube(T, zeta))
    drop = both(path, np.array([0, 0, 0.15, 1, 0, 0, 0.0]), np.zeros(6), 250)
    for tool, q in drop.items():
        dur, reb, deep = landing(q[:, 2])
        print(f"landing {tool}: contact {dur * 1e3:.0f} ms, deepest {deep * 1e3:.2f} mm, rebound "
              f"{reb * 1e3:.3f} mm (e = {np.sqrt(max(reb, 0) / 0.1):.3f}), rest penetration "
              f"{(HALF - q[-1, 2]) * 1e3:.3f} mm")
    slide = both(path, np.array([0, 0, HALF - 1e-4, 1, 0, 0, 0.0]),
                 np.array([1.0, 0, 0, 0, 0, 0]), 250)
    for tool, q in slide.items():
        print(f"slide {tool}: {q[-1, 0] * 1e3:.2f} mm (Coulomb v²/2μg = "
              f"{1e3 / (2 * MU * 9.81):.2f} mm)")


if __name__ == "__main__":
    main(*(float(x) for x in sys.argv[1:3]))
