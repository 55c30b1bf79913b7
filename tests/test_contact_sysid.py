"""Contact parameters identified from records that MuJoCo simulates, and solref (``timeconst``,
``dampratio``) as named parameters of a contact element.

Expected values: the stiffness and damping that the MJCF loader builds from a file compiled with
the other solref, MuJoCo's own simulation of the thrown cube (the truth it was given), and the
closed form ∂k/∂T = −2 k/T.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.contacts import Box, Contacts, Plane
from diffmb.io.mjcf import mjcf_forces
from diffmb.optim.params import ParamSet, default_transform, set_params

_CUBE = """<mujoco><option timestep="0.002" cone="elliptic"/><worldbody>
  <geom name="floor" type="plane" size="5 5 0.1" friction="{mu}" solref="{T} {z}"/>
  <body name="cube" pos="0 0 0.3"><freejoint name="root"/>
    <geom name="cube" type="box" size="0.05 0.05 0.05" mass="1" friction="{mu}"
          solref="{T} {z}"/></body>
  {ball}
</worldbody></mujoco>"""
_BALL = """<body name="ball" pos="0.5 0 0.3"><freejoint name="ball"/>
    <geom name="ball" type="sphere" size="0.05" mass="0.5" solref="-3000 -40"/></body>"""

FIELDS = ("stiffness", "damping", "tangential_stiffness", "tangential_damping")


def _file(tmp_path, name="cube.xml", mu=0.4, T=0.02, z=1.0, ball=True):
    f = tmp_path / name
    f.write_text(_CUBE.format(mu=mu, T=T, z=z, ball=_BALL if ball else ""))
    return f


def _contacts(path):
    return next(f for f in mjcf_forces(path) if isinstance(f, Contacts))


def test_solref_parameters_give_the_gains_of_a_file_with_that_solref(tmp_path):
    model = diffmb.load_mjcf(_file(tmp_path))
    el = _contacts(_file(tmp_path))
    ref = _contacts(_file(tmp_path, "other.xml", T=0.035, z=0.4))
    n = len(el.pairs)
    _, f = set_params(model, {"force.contacts.timeconst": jnp.full(n, 0.035),
                              "force.contacts.dampratio": jnp.full(n, 0.4)},
                      {"contacts": el})
    new = f["contacts"]
    pair = {(el.geoms[ia].name, o.name): i for i, ((ia, _, _), o) in enumerate(zip(
        el.pairs, el.others, strict=True))}
    follow = np.asarray(el.solref_pairs)
    # the cube on the floor follows; the ball's solref is direct (negative): its gains do not
    assert follow[pair["cube", "floor"]] and not follow[pair["ball", "floor"]]
    for field in FIELDS:
        # MuJoCo's compile puts the impedance at the new rest depth; the rescaling holds it at
        # the old one (1.1 % here, for T 0.02 -> 0.035 s and zeta 1 -> 0.4)
        np.testing.assert_allclose(np.asarray(getattr(new, field))[follow],
                                   np.asarray(getattr(ref, field))[follow], rtol=0.02)
        np.testing.assert_array_equal(np.asarray(getattr(new, field))[~follow],
                                      np.asarray(getattr(el, field))[~follow])
    np.testing.assert_array_equal(np.asarray(new.timeconst)[follow], 0.035)


def test_forward_results_do_not_change_with_the_solref_fields(tmp_path):
    path = _file(tmp_path, z=0.6, ball=False)
    model = diffmb.load_mjcf(path)
    el = _contacts(path)
    # the element the loader built before solref was a parameter: the same explicit gains
    old = Contacts([el.geoms[ia] for ia, _, _ in el.pairs], list(el.others), model=model,
                   **{f: getattr(el, f) for f in FIELDS}, mu=el.mu, margin=el.margin,
                   solimp=el.solimp, solimp_depth=el.solimp_depth)
    _, same = set_params(model, {"force.contacts.timeconst": el.timeconst,
                                 "force.contacts.dampratio": el.dampratio}, {"contacts": el})
    q = jnp.array([0.0, 0.0, 0.0495, 0.999, 0.03, -0.02, 0.01])
    q = q.at[3:].set(q[3:] / jnp.linalg.norm(q[3:]))
    v = jnp.array([0.3, -0.2, -0.1, 0.5, 0.2, -1.0])
    z = 1e-4 * jnp.ones((el.n_points, 3))
    wrench = jax.jit(lambda e: e.evaluate(model, q, v, z).f_ext)
    forces = [wrench(e) for e in (el, old, same["contacts"])]
    assert float(jnp.max(jnp.abs(forces[0]))) > 1.0  # in contact
    np.testing.assert_array_equal(np.asarray(forces[0]), np.asarray(forces[1]))
    np.testing.assert_array_equal(np.asarray(forces[0]), np.asarray(forces[2]))
    # mass-normalised defaults: unchanged by writing solref's own values
    box = Contacts([Box("cube", (0.05, 0.05, 0.05))], Plane(), model=model, timeconst=0.03,
                   dampratio=0.7)
    _, again = set_params(model, {"force.c.timeconst": box.timeconst,
                                  "force.c.dampratio": box.dampratio}, {"c": box})
    for field in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(box, field)),
                                      np.asarray(getattr(again["c"], field)))


def test_mass_normalised_defaults_follow_solref(tmp_path):
    model = diffmb.load_mjcf(_file(tmp_path))
    a = Contacts([Box("cube", (0.05, 0.05, 0.05))], Plane(), model=model, timeconst=0.03,
                 dampratio=0.7)
    b = Contacts([Box("cube", (0.05, 0.05, 0.05))], Plane(), model=model, timeconst=0.05,
                 dampratio=1.3)
    _, f = set_params(model, {"force.c.timeconst": jnp.array([0.05]),
                              "force.c.dampratio": jnp.array([1.3])}, {"c": a})
    for field in FIELDS:
        np.testing.assert_allclose(np.asarray(getattr(f["c"], field)),
                                   np.asarray(getattr(b, field)), rtol=1e-12)


def test_stiffness_gradient_with_respect_to_timeconst(tmp_path):
    model = diffmb.load_mjcf(_file(tmp_path))
    el = _contacts(_file(tmp_path))
    ps = ParamSet(model, ["force.contacts.timeconst"], {"contacts": el})

    def k(T):
        return ps.set(model, {"contacts": el}, {"force.contacts.timeconst": T})[1][
            "contacts"].stiffness[0]

    T = jnp.full(len(el.pairs), 0.02)
    g = jax.grad(k)(T)
    assert float(g[0]) == pytest.approx(-2.0 * float(el.stiffness[0]) / 0.02, rel=1e-12)
    assert default_transform("force.contacts.timeconst").kind == "positive"


def test_solref_parameters_are_validated(tmp_path):
    model = diffmb.load_mjcf(_file(tmp_path))
    f = {"contacts": _contacts(_file(tmp_path))}
    n = len(f["contacts"].pairs)
    with pytest.raises(ValueError, match="timeconst.*-0.01.*> 0"):
        set_params(model, {"force.contacts.timeconst": jnp.full(n, 0.02).at[0].set(-0.01)}, f)
    with pytest.raises(ValueError, match="dampratio.*> 0"):
        set_params(model, {"force.contacts.dampratio": jnp.full(n, 0.5).at[1].set(0.0)}, f)
    with pytest.raises(ValueError, match="'force.contacts.mu'.*mu"):
        set_params(model, {"force.contacts.mu": jnp.full(n, 0.3).at[0].set(-0.1)}, f)
    with pytest.raises(ValueError, match="shape"):
        set_params(model, {"force.contacts.timeconst": jnp.array([0.02] * (n + 1))}, f)
    explicit = Contacts([Box("cube", (0.05, 0.05, 0.05))], Plane(), model=model,
                        stiffness=1e4, damping=50.0, tangential_stiffness=1e4,
                        tangential_damping=50.0)
    with pytest.raises(ValueError, match="no parameter follows solref"):
        set_params(model, {"force.c.timeconst": jnp.array([0.03])}, {"c": explicit})


@pytest.mark.slow  # ~1-2 min: a 0.5 s record, 3 parameters, exact Jacobians through contact
def test_thrown_cube_friction_and_solref_from_a_mujoco_record(tmp_path):
    """MuJoCo throws a cube onto its floor (μ = 0.4, solref (0.02, 0.5), its default pyramidal
    cone, noise 0.1 mm / 1e-4 on the seven coordinates): it lands flat, bounces, slides 0.3 m
    and stops. diffmb's contacts as MuJoCo's rows (``contacts="constraint"``: the same
    contact model, tests/test_contact_rows.py) and multiple shooting over 20 ms segments
    (a single shot over the whole record stops in local minima of a rugged cost): from a guess
    25-50 % off, μ, T and ζ each within 5 % of the truth and inside their 95 % intervals, in
    fewer rollouts than mujoco.sysid takes on the same record from the same guess."""
    from diffmb.bench import sysid as B

    data = B.cube_record(0.5)
    path = tmp_path / "cube.xml"
    path.write_text(data["xml"])
    r = B.run_diffmb_cube(path, data, B.cube_guess())
    assert r["success"], r
    for k, truth in B.CUBE_TRUTH.items():
        est, half = r["estimates"][k], r["ci95_half"][k]
        assert abs(est - truth) < 0.05 * truth, (k, r)
        assert abs(est - truth) < half, (k, r)
    peer = B.run_mujoco_cube(data, B.cube_guess())
    assert r["rollouts"] < peer["rollouts"], (r, peer)


@pytest.mark.slow  # ~1-2 min
def test_solref_from_mujocos_record_of_a_dropped_cube(tmp_path):
    """MuJoCo drops the cube flat from 0.1 m (no sliding: the normal rows alone act, and
    diffmb's implicit step with ``contacts="constraint"`` is MuJoCo's Euler step to rounding):
    it bounces and settles. The fit of solref (T, ζ) = (0.02, 0.5) from (0.03, 0.7), noise
    1e-4 on the seven coordinates, recovers both within 2 % and within their 95 % intervals."""
    import mujoco

    from diffmb.bench import sysid as B

    truth = dict(B.CUBE_TRUTH)
    xml = B.cube_mjcf(**truth)
    path = tmp_path / "cube.xml"
    path.write_text(xml)
    mj = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(mj)
    d.qpos[:] = B.CUBE_Q0
    n = 200
    q = np.zeros((n + 1, 7))
    q[0] = d.qpos
    for k in range(n):
        mujoco.mj_step(mj, d)
        q[k + 1] = d.qpos
    q = q + 1e-4 * np.random.default_rng(3).standard_normal(q.shape)
    t = np.arange(n + 1) * B.CUBE_DT
    model = diffmb.load_mjcf(path)
    (contacts,) = [f for f in diffmb.mjcf_forces(path, contacts="constraint")
                   if isinstance(f, diffmb.contacts.Contacts)]
    names = ["force.contacts.timeconst", "force.contacts.dampratio"]
    rec = {"t": t, "q": q, "q0": np.array(B.CUBE_Q0), "v0": np.zeros(6)}
    res = diffmb.optim.fit(model, rec, names, forces={"contacts": contacts},
                           init={names[0]: jnp.full(1, 0.03), names[1]: jnp.full(1, 0.7)},
                           simulate_kwargs={"dt": B.CUBE_DT, "solver": "implicit"},
                           weights={"q": 1e4}, shooting="single", initial_state="known",
                           progress=False)
    assert res.success, res.message
    for name, key in zip(names, ("timeconst", "dampratio"), strict=True):
        est, std = float(np.ravel(res.estimates[name])[0]), float(np.ravel(res.std[name])[0])
        assert abs(est - truth[key]) < 0.02 * truth[key], (name, est, std)
        assert abs(est - truth[key]) < 1.96 * std + 1e-12, (name, est, std)
