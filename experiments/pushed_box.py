"""A 2 kg box pushed along MuJoCo's floor by a one-joint (prismatic) arm with a frictionless
sphere tip (motor force 16 N for 0.3 s, then none; joint damping 4 N s/m), μ = 0.5, elliptic
cone, 2 ms. diffmb fits the box's friction on the floor and its mass from MuJoCo's record
(noise 0.1 mm on every coordinate, guess μ 0.35, m 1.4 kg, the initial state and the motor
force known), with one contact element per pair so that the box–floor μ is its own parameter.
Also prints how far MuJoCo's box travels with other cones (its box leaves the floor while
pushed). Run: ``python experiments/pushed_box.py`` (docs/identification.md).
"""

import jax.numpy as jnp
import mujoco
import numpy as np

import diffmb
from diffmb.contacts import Contacts
from diffmb.contacts.element import follow_solref
from diffmb.controls import KnotTable
from diffmb.io.mjcf import mjcf_forces
from diffmb.optim import fit

MU, MASS, SIGMA, DT, FORCE, PUSH, N = 0.5, 2.0, 1e-4, 0.002, 16.0, 0.3, 300
XML = f"""<mujoco><option timestep="{DT}" cone="elliptic"/><worldbody>
  <geom name="floor" type="plane" size="5 5 0.1" friction="{MU}"/>
  <body name="arm" pos="0 0 0.05"><joint name="slide" type="slide" axis="1 0 0" damping="4"/>
    <geom name="tip" type="sphere" size="0.02" mass="0.5" contype="2" conaffinity="2"
          condim="1"/></body>
  <body name="box" pos="0.07 0 0.05"><freejoint name="box"/>
    <geom name="box" type="box" size="0.05 0.05 0.05" mass="{MASS}" friction="{MU}"
          contype="3" conaffinity="3"/></body>
</worldbody><actuator><motor name="push" joint="slide"/></actuator></mujoco>"""


def record(xml=XML):
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    for _ in range(100):  # settle
        mujoco.mj_step(m, d)
    d.qvel[:], d.time = 0.0, 0.0
    q0, v0 = d.qpos.copy(), d.qvel.copy()
    q, u, lifted = [d.qpos.copy()], [], 0
    for k in range(N):
        d.ctrl[0] = FORCE if k * DT < PUSH else 0.0
        u.append(d.ctrl[0])
        mujoco.mj_step(m, d)
        q.append(d.qpos.copy())
        lifted = max(lifted, int(not any({d.contact[i].geom1, d.contact[i].geom2} == {0, 2}
                                         for i in range(d.ncon))))
    tau = np.zeros((N + 1, m.nv))
    tau[:-1, 0] = u
    return np.arange(N + 1) * DT, np.array(q), tau, q0, v0, bool(lifted)


def per_pair(path, model):
    """The file's contact element split into one element per pair, named <geom>_<other>."""
    el = next(f for f in mjcf_forces(path) if isinstance(f, Contacts))
    out = {}
    for i, ((ia, _, _), other) in enumerate(zip(el.pairs, el.others, strict=True)):
        fields = ("stiffness", "damping", "tangential_stiffness", "tangential_damping", "mu",
                  "margin")
        c = Contacts([el.geoms[ia]], [other], model=model,
                     **{f: getattr(el, f)[i:i + 1] for f in fields})
        out[f"{el.geoms[ia].name}_{other.name}"] = follow_solref(
            c, el.timeconst[i:i + 1], el.dampratio[i:i + 1], el.solref_pairs[i:i + 1] or (False,))
    return out


def main(path="pushed_box.xml"):
    with open(path, "w") as f:
        f.write(XML)
    t, q, tau, q0, v0, lifted = record()
    model = diffmb.load_mjcf(path)
    forces = {type(f).__name__.lower(): f for f in mjcf_forces(path)
              if not isinstance(f, Contacts) and "Actuators" not in type(f).__name__}
    forces.update(per_pair(path, model))
    tr = diffmb.simulate(model, jnp.asarray(q0), jnp.asarray(v0), t1=float(t[-1]), dt=DT,
                         forces=tuple(forces.values()), saveat=jnp.asarray(t),
                         solver="implicit", control=KnotTable(jnp.asarray(t), jnp.asarray(tau),
                                                              "zoh"))
    print(f"box travel: MuJoCo {q[-1, 1] - q0[1]:.4f} m (left the floor while pushed: {lifted}),"
          f" diffmb at the truth {float(tr.q[-1, 1]) - q0[1]:.4f} m")
    for cone in ("pyramidal",):
        print(f"MuJoCo with cone={cone}: "
              f"{record(XML.replace('elliptic', cone))[1][-1, 1] - q0[1]:.4f} m")
    noisy = q + SIGMA * np.random.default_rng(0).standard_normal(q.shape)
    names = ["force.box_floor.mu", "body.box.mass"]
    res = fit(model, {"t": t, "q": noisy, "tau": tau, "q0": q0, "v0": v0}, names, forces=forces,
              init={names[0]: jnp.array([0.35]), names[1]: jnp.asarray(1.4)},
              simulate_kwargs={"dt": DT, "solver": "implicit"}, input_interp="zoh",
              weights={"q": 1 / SIGMA}, shooting="single", initial_state="known",
              progress=False)
    print(res.message)
    for k, truth in zip(names, (MU, MASS), strict=True):
        est, sd = np.ravel(res.estimates[k])[0], np.ravel(res.std[k])[0]
        print(f"{k}: {est:.4f} ± {sd:.4f} (truth {truth}, {100 * (est / truth - 1):+.1f} %)")


if __name__ == "__main__":
    main()
