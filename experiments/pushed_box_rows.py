"""A box struck by a planar two-link arm, with diffmb's contacts as MuJoCo's soft rows
(``contacts="constraint"``): the third part of docs/identification.md, "A box pushed by an arm".

The arm turns about two vertical hinges (motors, damping 0.1 N m s/rad, a torque pulse of
0.1 s); its sphere tip (priority 1, friction 0.1) strikes a flat 0.6 kg box (0.12 x 0.12 x
0.05 m, μ = 0.3 on MuJoCo's default pyramidal cone, 2 ms) 13 mm below the box's centre. The
record starts from the settled scene and lasts 0.5 s, every step sampled, noise 1e-4 on every
coordinate. Prints:

1. how far diffmb's trajectory is from MuJoCo's (implicit step, the motor torques as a
   zero-order hold);
2. how MuJoCo's own record moves when μ or the mass change by 1e-6 .. 1e-2 of themselves;
3. the single-shot fit of the box–floor μ (``force.contacts.mu[0]``) and the box's mass from
   a guess 25 % / 40 % off, and the cost at the truth for comparison.

Run: ``python experiments/pushed_box_rows.py`` (a few minutes).
"""

import pathlib
import tempfile

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import diffmb
from diffmb.controls import zero_order_hold
from diffmb.io.mjcf import mjcf_forces
from diffmb.optim import fit

MU, MASS, SIGMA, DT, T = 0.3, 0.6, 1e-4, 0.002, 0.5
TORQUE, PULSE, GAP = (-0.3, 1.5), 0.1, 0.03
Q_ARM = (0.6, -1.2)


def xml(mu=MU, mass=MASS):
    """The scene; the box's inertia is the true box's whatever ``mass`` (the fit's unknown is
    the mass alone)."""
    ix, iz = MASS * (0.12**2 + 0.05**2) / 12, MASS * (0.12**2 + 0.12**2) / 12
    return f"""<mujoco model="struck_box"><option timestep="{DT}"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="{mu!r}"/>
    <body name="upper" pos="0 0 0.012"><joint name="shoulder" axis="0 0 1" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.015" mass="0.6" contype="0"
            conaffinity="0"/>
      <body name="fore" pos="0.3 0 0"><joint name="elbow" axis="0 0 1" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.015" mass="0.4" contype="0"
              conaffinity="0"/>
        <geom name="finger" type="sphere" pos="0.3 0 0" size="0.01" mass="0.05"
              friction="0.1" priority="1" contype="2" conaffinity="2"/>
      </body>
    </body>
    <body name="box" pos="0.6 0 0.025"><freejoint name="box_root"/>
      <inertial pos="0 0 0" mass="{mass!r}" diaginertia="{ix!r} {ix!r} {iz!r}"/>
      <geom name="box" type="box" size="0.06 0.06 0.025" friction="{mu!r}" contype="3"
            conaffinity="3"/>
    </body>
  </worldbody>
  <actuator><motor name="shoulder" joint="shoulder"/><motor name="elbow" joint="elbow"/>
  </actuator>
</mujoco>"""


def record(mu=MU, mass=MASS, seed=0):
    """MuJoCo's record: the scene settled for 0.5 s, then the torque pulse."""
    m = mujoco.MjModel.from_xml_string(xml(mu, mass))
    d = mujoco.MjData(m)
    d.qpos[:2] = Q_ARM
    tip = 0.3 * np.cos(Q_ARM[0]) + 0.3 * np.cos(Q_ARM[0] + Q_ARM[1])
    d.qpos[2:5] = tip + 0.01 + 0.06 + GAP, 0.0, 0.025
    for _ in range(250):
        mujoco.mj_step(m, d)
    d.time = 0.0
    q0, v0 = d.qpos.copy(), d.qvel.copy()
    n = int(round(T / DT))
    t = np.arange(n + 1) * DT
    ctrl = np.array([TORQUE]) * np.where(t < PULSE, np.sin(np.pi * t / PULSE), 0.0)[:, None]
    q = [d.qpos.copy()]
    for k in range(n):
        d.ctrl[:] = ctrl[k]
        mujoco.mj_step(m, d)
        q.append(d.qpos.copy())
    q = np.array(q)
    noisy = q + SIGMA * np.random.default_rng(seed).standard_normal(q.shape)
    return dict(t=t, q=noisy, q_true=q, q0=q0, v0=v0, ctrl=ctrl)


def main():
    jax.config.update("jax_enable_x64", True)
    rec = record()
    tmp = pathlib.Path(tempfile.mkdtemp())

    # 1. diffmb against MuJoCo at the truth
    path = tmp / "truth.xml"
    path.write_text(xml())
    model = diffmb.load_mjcf(path)
    ctl = zero_order_hold(jnp.asarray(rec["t"]), jnp.asarray(rec["ctrl"]))
    sim = diffmb.simulate(model, jnp.asarray(rec["q0"]), jnp.asarray(rec["v0"]), t1=T, dt=DT,
                          solver="implicit", forces=mjcf_forces(path, contacts="constraint"),
                          control=ctl, saveat=rec["t"])
    print(f"diffmb against mj_step over {T} s: "
          f"{np.abs(np.asarray(sim.q) - rec['q_true']).max():.2e} (largest coordinate error)")
    z = rec["q_true"][:, 4]
    print(f"box centre height: {1e3 * z.min():.4f} .. {1e3 * z.max():.4f} mm "
          "(25 mm: the corners at the floor)")

    # 2. MuJoCo's record against small changes of μ and the mass
    for rel in (1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 1e-2):
        dmu = np.abs(record(MU * (1 + rel))["q_true"] - rec["q_true"]).max()
        dm = np.abs(record(MU, MASS * (1 + rel))["q_true"] - rec["q_true"]).max()
        print(f"MuJoCo's record moves by {dmu:.1e} (mu) and {dm:.1e} (mass) at {rel:g} of each")

    # 3. the single-shot fit from the guess
    guess = tmp / "guess.xml"
    guess.write_text(xml(MU * 0.75, MASS * 1.4))
    model = diffmb.load_mjcf(guess)
    forces = {type(f).__name__.lower(): f for f in mjcf_forces(guess, contacts="constraint")}
    forces.pop("actuators")  # the motors' torques enter as tau
    tau = np.zeros((rec["t"].size, model.nv))
    tau[:, :2] = rec["ctrl"]
    data = {"t": rec["t"], "q": rec["q"], "tau": tau, "q0": rec["q0"], "v0": rec["v0"]}
    names = ["force.contacts.mu[0]", "body.box.mass"]
    kw = dict(forces=forces, simulate_kwargs={"dt": DT, "solver": "implicit"},
              input_interp="zoh", weights={"q": 1 / SIGMA}, shooting="single",
              initial_state="known", progress=False)
    res = fit(model, data, names, max_steps=60, **kw)
    at_truth = fit(model, data, names, max_steps=0,
                   init={names[0]: MU, names[1]: MASS}, **kw)
    for k, truth in zip(names, (MU, MASS), strict=True):
        est, std = float(res.estimates[k]), float(res.std[k])
        print(f"{k}: {est:.4f} ± {std:.4f} (truth {truth}, {100 * (est / truth - 1):+.1f} %)")
    accepted = sum(1 for h in res.history[1:] if h.get("accepted"))
    print(f"cost {res.cost:.4g} after {res.n_iter} iterations ({res.message}); "
          f"at the truth {at_truth.cost:.4g}; rollout-equivalents "
          f"{(1 + accepted) * (len(names) + 1) + res.n_iter}")

    # 4. mujoco.sysid beside it (its defaults), the same record and guess
    print("mujoco.sysid:", mujoco_sysid(rec, MU * 0.75, MASS * 1.4))


def mujoco_sysid(rec, mu, mass):
    """mujoco.sysid's estimates of (μ of the floor and the box, the box's mass) and its rollout
    count, from (mu, mass), the initial state known."""
    import io

    from mujoco import sysid

    from diffmb.bench.sysid import _counted_residual

    def friction(spec, p):
        for g in ("floor", "box"):
            f = list(spec.geom(g).friction)
            f[0] = float(p.value[0])
            spec.geom(g).friction = f

    def body_mass(spec, p):
        spec.body("box").mass = float(p.value[0])

    spec = mujoco.MjSpec.from_string(xml(mu, mass))
    m = spec.compile()
    params = sysid.ParameterDict()
    params.add(sysid.Parameter("mu", nominal=mu, min_value=mu / 4, max_value=mu * 4,
                               modifier=friction))
    params.add(sysid.Parameter("mass", nominal=mass, min_value=mass / 4, max_value=mass * 4,
                               modifier=body_mass))
    x0 = sysid.create_initial_state(m, rec["q0"], rec["v0"], np.zeros(0))
    ctrl = sysid.TimeSeries(rec["t"], rec["ctrl"], {})
    # (the box by its body's name: MuJoCo's resolver reads a free joint's width by body)
    signals = [("shoulder", sysid.SignalType.MjStateQPos), ("elbow", sysid.SignalType.MjStateQPos),
               ("box", sysid.SignalType.MjStateQPos)]
    q = sysid.TimeSeries.from_names(rec["t"], rec["q"], m, signals)
    seq = sysid.ModelSequences("box", spec, "strike", x0, ctrl, q, allow_missing_sensors=True)
    residual_fn, count = _counted_residual(sysid, seq)
    opt, _ = sysid.optimize(params, residual_fn, optimizer="mujoco", max_iters=100,
                            output=io.StringIO())
    return dict(mu=float(opt["mu"].value[0]), mass=float(opt["mass"].value[0]),
                rollouts=count["rollouts"])


if __name__ == "__main__":
    main()
