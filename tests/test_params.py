"""Named parameters. Oracles: the Model's own arrays read directly (numpy indexing), the URDF
file's numbers (the UR5 shipped in diffmb/assets), closed-form transforms, and finite
differences of a simulation for the gradient through a named parameter."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.forces.elements import BodyWrench, JointDamping
from diffmb.model import InertiaWarning, check_inertia
from diffmb.optim.params import ParamSet, bounded, get_params, positive, set_params


def _ur5():
    from diffmb.studies.arm import URDF

    return diffmb.load_urdf(URDF)


def test_get_matches_urdf_numbers():
    m = _ur5()
    p = get_params(m, ["body.upper_arm_link.mass", "body.upper_arm_link.com",
                       "body.forearm_link.inertia", "body.forearm_link.inertia_diag",
                       "joint.elbow_joint.damping"])
    # numbers from ur5_robot.urdf (<inertial> of upper_arm_link and forearm_link)
    assert p["body.upper_arm_link.mass"] == pytest.approx(8.393)
    np.testing.assert_allclose(p["body.upper_arm_link.com"], [0.0, 0.0, 0.28])
    np.testing.assert_allclose(p["body.forearm_link.inertia"],
                               [0.049443313556, 0.049443313556, 0.004095, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(p["body.forearm_link.inertia_diag"],
                               [0.049443313556, 0.049443313556, 0.004095])
    assert p["joint.elbow_joint.damping"].shape == ()


def test_set_writes_the_right_entries_and_nothing_else():
    m = _ur5()
    I6 = np.array([0.3, 0.4, 0.5, 0.01, -0.02, 0.03])
    m2 = set_params(m, {"body.forearm_link.mass": 3.0, "body.forearm_link.inertia": I6,
                        "body.wrist_1_link.com": [0.1, 0.2, 0.3],
                        "joint.wrist_2_joint.damping": 0.7,
                        "joint.elbow_joint.armature": 0.05,
                        "joint.elbow_joint.stiffness": 4.0})
    i = m.body_index("forearm_link")
    mass = np.array(m.body_mass)
    mass[i] = 3.0
    np.testing.assert_array_equal(np.asarray(m2.body_mass), mass)
    Ic = np.asarray(m2.body_inertia)[i]
    expect = np.array([[0.3, 0.01, -0.02], [0.01, 0.4, 0.03], [-0.02, 0.03, 0.5]])
    np.testing.assert_array_equal(Ic, expect)
    others = [k for k in range(m.n_bodies) if k != i]
    np.testing.assert_array_equal(np.asarray(m2.body_inertia)[others],
                                  np.asarray(m.body_inertia)[others])
    np.testing.assert_array_equal(np.asarray(m2.body_com)[m.body_index("wrist_1_link")],
                                  [0.1, 0.2, 0.3])
    d = np.zeros(6)
    d[4] = 0.7
    np.testing.assert_array_equal(np.asarray(m2.damping), d)
    assert float(m2.armature[2]) == 0.05 and float(m2.stiffness[2]) == 4.0
    # inertia_diag keeps the off-diagonal terms (a physical diagonal: 1 + 2 > 2.5)
    m3 = set_params(m2, {"body.forearm_link.inertia_diag": [1.0, 2.0, 2.5]})
    e3 = expect.copy()
    e3[[0, 1, 2], [0, 1, 2]] = [1.0, 2.0, 2.5]
    np.testing.assert_array_equal(np.asarray(m3.body_inertia)[i], e3)


def test_force_element_fields():
    m = _ur5()
    forces = {"push": BodyWrench("forearm_link", np.arange(6.0)), "damp": JointDamping(np.ones(6))}
    ps = ParamSet(m, ["force.push.wrench", "force.damp.damping", "body.forearm_link.mass"],
                  forces)
    assert ps.size == 13
    assert ps.scalar_names[0] == "force.push.wrench[0]" and ps.scalar_names[-1] == \
        "body.forearm_link.mass"
    vals = ps.unflatten(jnp.arange(13.0))
    m2, f2 = ps.set(m, forces, vals)
    np.testing.assert_array_equal(np.asarray(f2["push"].wrench), np.arange(6.0))
    np.testing.assert_array_equal(np.asarray(f2["damp"].damping), np.arange(6.0, 12.0))
    assert float(m2.body_mass[m.body_index("forearm_link")]) == 12.0
    assert forces["damp"].damping[0] == 1.0  # the input dict is not mutated
    np.testing.assert_array_equal(np.asarray(ps.flatten(ps.get(m2, f2))), np.arange(13.0))


@pytest.mark.parametrize(
    "name, word",
    [("body.nolink.mass", "nolink"), ("joint.nojoint.damping", "nojoint"),
     ("body.forearm_link.colour", "colour"), ("joint.elbow_joint.friction", "friction"),
     ("force.aero.CLa", "aero"), ("mass", "expected"), ("force.push.nothing", "nothing")],
)
def test_unknown_names_raise_keyerror_naming_them(name, word):
    m = _ur5()
    with pytest.raises(KeyError, match=word):
        ParamSet(m, [name], {"push": BodyWrench("forearm_link", np.zeros(6))})


def test_transforms_closed_form():
    z = np.array([-2.0, 0.0, 1.5])
    np.testing.assert_allclose(positive().forward(jnp.asarray(z)), np.exp(z))
    b = bounded(1.0, 3.0)
    np.testing.assert_allclose(b.forward(jnp.asarray(z)), 1.0 + 2.0 / (1.0 + np.exp(-z)))
    np.testing.assert_allclose(b.inverse(b.forward(jnp.asarray(z))), z, rtol=1e-12)
    np.testing.assert_allclose(bounded(lo=2.0).forward(jnp.asarray(z)), 2.0 + np.exp(z))
    np.testing.assert_allclose(bounded(hi=2.0).forward(jnp.asarray(z)), 2.0 - np.exp(z))
    with pytest.raises(ValueError):
        positive().inverse(-1.0)
    with pytest.raises(ValueError):
        bounded(0.0, 1.0).inverse(1.5)


def test_transform_vector_derivative_matches_grad():
    from diffmb.optim.params import Transforms, identity

    tr = Transforms((positive(), bounded(1.0, 3.0), bounded(lo=2.0), bounded(hi=2.0), identity(),
                     positive()))
    z = jnp.array([-2.0, 0.3, 1.5, -0.7, 4.0, 0.5])
    p = tr.forward(z)
    for i, t in enumerate(tr.items):
        assert float(p[i]) == pytest.approx(float(t.forward(z[i])), rel=1e-15)
        assert float(tr.derivative(z)[i]) == pytest.approx(float(jax.grad(t.forward)(z[i])),
                                                           rel=1e-13)
    np.testing.assert_allclose(tr.inverse(np.asarray(p)), z, rtol=1e-12)
    with pytest.raises(ValueError, match="initial value of 'b'"):
        tr.inverse([1.0, 0.5, 3.0, 1.0, 0.0, 1.0], ["a", "b", "c", "d", "e", "f"])


@pytest.mark.slow
def test_gradient_through_named_parameter_matches_finite_differences():
    b = diffmb.ModelBuilder("pend")
    b.add_body("l1", -1, mass=1.0, com=(0, 0, -0.5), inertia=(0.02, 0.02, 0.001),
               joints=[dict(name="j1", type="hinge", axis=(0, 1, 0), damping=0.3)])
    m = b.build()
    ps = ParamSet(m, ["body.l1.mass", "joint.j1.damping"])

    def final_angle(x):
        mm, _ = ps.set(m, None, ps.unflatten(x))
        tr = diffmb.simulate(mm, jnp.array([0.5]), jnp.array([0.0]), t1=0.3, dt=0.01,
                             forces=(JointDamping(),), saveat=[0.3], adjoint="direct")
        return tr.q[-1, 0]

    x = jnp.array([1.0, 0.3])
    g = jax.jit(jax.grad(final_angle))(x)
    f = jax.jit(final_angle)
    h = 1e-6
    fd = [(f(x.at[i].add(h)) - f(x.at[i].add(-h))) / (2 * h) for i in range(2)]
    np.testing.assert_allclose(np.asarray(g), np.asarray(fd), rtol=1e-6, atol=1e-9)
    # set under jit: new values do not retrace
    setj = eqx.filter_jit(eqx.debug.assert_max_traces(
        lambda mm, v: ps.set(mm, None, ps.unflatten(v))[0].damping, max_traces=1))
    assert float(setj(m, jnp.array([2.0, 0.1]))[0]) == 0.1
    assert float(setj(m, jnp.array([3.0, 0.2]))[0]) == 0.2


# --- values validated where they enter (issue "No silent wrong answers") ----------------------


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("body.forearm_link.mass", np.nan, ["body.forearm_link.mass", "finite"]),
        ("body.forearm_link.mass", np.inf, ["body.forearm_link.mass", "finite"]),
        ("body.forearm_link.mass", -1.0, ["body.forearm_link.mass", "mass"]),
        ("body.wrist_1_link.com", [0.1, np.nan, 0.0], ["body.wrist_1_link.com", "finite"]),
        ("joint.elbow_joint.damping", -0.1, ["joint.elbow_joint.damping", "negative"]),
        ("joint.elbow_joint.stiffness", -2.0, ["joint.elbow_joint.stiffness", "negative"]),
        ("joint.elbow_joint.armature", -0.01, ["joint.elbow_joint.armature", "negative"]),
        ("joint.elbow_joint.damping", np.inf, ["joint.elbow_joint.damping", "finite"]),
        # eigenvalues of diag(1, 1, -1): not positive semi-definite
        ("body.forearm_link.inertia", [1.0, 1.0, -1.0, 0, 0, 0],
         ["body.forearm_link.inertia", "semi-definite"]),
        # 0.1 + 0.1 < 1: no mass distribution has these principal inertias
        ("body.forearm_link.inertia", [0.1, 0.1, 1.0, 0, 0, 0],
         ["body.forearm_link.inertia", "triangle"]),
        ("body.forearm_link.inertia_diag", [0.1, 0.1, 1.0],
         ["body.forearm_link.inertia_diag", "triangle"]),
        ("body.forearm_link.inertia_diag", [-0.1, 0.1, 0.1],
         ["body.forearm_link.inertia_diag", "semi-definite"]),
    ],
)
def test_bad_values_raise_valueerror_naming_the_parameter(name, value, words):
    m = _ur5()
    with pytest.raises(ValueError) as e:
        set_params(m, {name: value})
    for w in words:
        assert w in str(e.value), str(e.value)
    # the same through a ParamSet
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        ParamSet(m, [name]).set(m, None, {name: value})


@pytest.mark.parametrize(
    "name, value, expected, given",
    [("body.wrist_1_link.com", 0.5, "(3,)", "()"),
     ("body.forearm_link.inertia", [0.1, 0.1, 0.1], "(6,)", "(3,)"),
     ("body.forearm_link.mass", [1.0, 2.0], "()", "(2,)"),
     ("joint.elbow_joint.damping", [0.1, 0.2], "()", "(2,)")],
)
def test_wrong_shape_is_refused_not_broadcast(name, value, expected, given):
    m = _ur5()
    with pytest.raises(ValueError) as e:
        set_params(m, {name: value})
    msg = str(e.value)
    assert name in msg and expected in msg and given in msg, msg


def test_bad_force_field_value_refused():
    m = _ur5()
    forces = {"push": BodyWrench("forearm_link", np.zeros(6))}
    bad = np.zeros(6)
    bad[2] = np.nan
    with pytest.raises(ValueError, match=r"force\.push\.wrench"):
        set_params(m, {"force.push.wrench": bad}, forces)
    with pytest.raises(ValueError, match=r"force\.push\.wrench"):
        set_params(m, {"force.push.wrench": 1.0}, forces)  # a scalar for a 6-vector


def test_good_values_still_set_and_zero_is_allowed():
    m = _ur5()
    i = m.body_index("forearm_link")
    m2 = set_params(m, {"body.forearm_link.mass": 0.0, "joint.elbow_joint.damping": 0.0,
                        "body.forearm_link.inertia": [0.2, 0.2, 0.3, 0.0, 0.0, 0.0],
                        "body.wrist_1_link.com": np.array([0.0, 0.1, 0.0])})
    assert float(m2.body_mass[i]) == 0.0
    np.testing.assert_array_equal(np.asarray(m2.body_inertia)[i], np.diag([0.2, 0.2, 0.3]))
    # the triangle inequality holds with equality (a thin rod): allowed
    set_params(m, {"body.forearm_link.inertia_diag": [0.5, 0.5, 1.0]})


def test_traced_values_pass_through_unchecked():
    m = _ur5()
    i = m.body_index("forearm_link")
    # under jit a NaN is a traced value: it is written, not refused (and not a tracer error)
    f = jax.jit(lambda x: set_params(m, {"body.forearm_link.mass": x}).body_mass[i])
    assert float(f(2.5)) == 2.5
    assert np.isnan(float(f(jnp.nan)))
    g = jax.grad(lambda x: set_params(m, {"body.forearm_link.mass": x}).body_mass[i] ** 2)(3.0)
    assert float(g) == pytest.approx(6.0)
    v = jax.vmap(lambda x: set_params(m, {"joint.elbow_joint.damping": x}).damping[2])(
        jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(np.asarray(v), [0.1, 0.2])
    # shapes are static: a wrong shape is refused even under a trace
    with pytest.raises(ValueError, match=r"body\.wrist_1_link\.com"):
        jax.jit(lambda x: set_params(m, {"body.wrist_1_link.com": x}).body_com)(1.0)


# --- one public inertia check, shared by ModelBuilder and the parameters ---------------------


def test_check_inertia_refuses_what_cannot_be_simulated_naming_the_body():
    for mass, inertia, words in [
        (-1.0, np.eye(3), "mass must be finite and >= 0, got -1.0"),
        (np.nan, np.eye(3), "mass must be finite"),
        (1.0, np.diag([1.0, np.inf, 1.0]), "non-finite"),
        (1.0, [[1.0, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], "not symmetric"),
        (1.0, np.ones(2), "shape (2,)"),
    ]:
        with pytest.raises(ValueError) as e:
            check_inertia("link", mass, inertia, source="robot.urdf")
        assert "robot.urdf: body 'link'" in str(e.value) and words in str(e.value), str(e.value)


@pytest.mark.parametrize("inertia, mass, kind, words", [
    (np.diag([0.1, 0.1, 0.5]), 1.0, "triangle", "violate the triangle inequality"),
    (np.diag([0.1, 0.1, -1e-11]), 1.0, "roundoff", "at round-off level"),
    (np.diag([1.0, 1.0, -1.0]), 1.0, "not_psd", "not positive semi-definite"),
    (np.diag([0.1, 0.2, 0.25]), 0.0, "zero_mass", "zero mass with non-zero inertia"),
])
def test_check_inertia_warns_implausible_and_strict_refuses(inertia, mass, kind, words):
    with pytest.warns(InertiaWarning, match=f"body 'link': .*{words}"):
        issues = check_inertia("link", mass, inertia)
    assert [i.kind for i in issues] == [kind] and issues[0].body == "link"
    assert words in str(issues[0]) and str(issues[0]).startswith("body 'link': ")
    with pytest.raises(ValueError, match=f"body 'link': .*{words}.*strict=True"):
        check_inertia("link", mass, inertia, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [i.kind for i in check_inertia("link", mass, inertia, warn=False)] == [kind]


def test_check_inertia_passes_valid_bodies_silently():
    c, s = np.cos(0.3), np.sin(0.3)
    R = np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_inertia("rod", 1.0, [0.5, 0.5, 1.0]) == []  # triangle with equality
        assert check_inertia("box", 2.0, R @ np.diag([0.1, 0.2, 0.25]) @ R.T, strict=True) == []
        assert check_inertia("point", 1.0, np.zeros((3, 3)), strict=True) == []


def test_builder_and_parameters_judge_inertia_by_check_inertia():
    tri = np.diag([0.1, 0.1, 0.5])
    (issue,) = check_inertia("b", 1.0, tri, source="unit", warn=False)
    b = diffmb.ModelBuilder(source="unit")
    b.add_body("a", -1, mass=1.0, inertia=np.diag([0.1, 0.1, 0.1]),
               joints=[{"name": "j0", "type": "hinge"}])
    with pytest.warns(InertiaWarning) as rec:
        b.add_body("b", "a", mass=1.0, inertia=tri, pos=(0.0, 0.0, 0.1),
                   joints=[{"name": "j1", "type": "hinge", "axis": (1.0, 0.0, 0.0)}])
    assert str(rec[0].message) == issue.message + ", loaded as is"
    # a parameter refuses what the builder only warns about, with the same words
    m = _ur5()
    with pytest.raises(ValueError) as e:
        set_params(m, {"body.forearm_link.inertia_diag": [0.1, 0.1, 0.5]})
    assert e.value.args[0] == ("parameter 'body.forearm_link.inertia_diag': body 'forearm_link':"
                               f" {issue.detail}")


_ARM_AND_BOX = """<mujoco model="arm_and_box"><option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="0.3" contype="1" conaffinity="1"/>
    <body name="upper" pos="0 0 0.012"><joint name="shoulder" type="hinge" axis="0 0 1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.015" mass="0.6" contype="0"
            conaffinity="0"/>
      <body name="fore" pos="0.3 0 0"><joint name="elbow" type="hinge" axis="0 0 1"/>
        <inertial pos="0.16 0 0" mass="0.45" diaginertia="0.0001 0.004 0.004"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.015" contype="0" conaffinity="0"/>
        <geom name="finger" type="sphere" pos="0.3 0 0" size="0.01" friction="0.1"
              priority="1" contype="2" conaffinity="2"/>
      </body>
    </body>
    <body name="box" pos="0.58 0 0.025"><freejoint/>
      <inertial pos="0 0 0" mass="{mass}" diaginertia="0.001 0.001 0.0015"/>
      <geom name="box" type="box" size="0.06 0.06 0.025" friction="0.3" contype="3"
            conaffinity="3"/>
    </body>
  </worldbody>
</mujoco>"""


@pytest.mark.parametrize("body, mass", [("box", 0.9), ("fore", 0.7)])
def test_contact_rows_weight_follows_a_fitted_mass_as_mujocos_does(tmp_path, body, mass):
    """The rows' inverse weight (R = (1 − d)/d · invweight) is MuJoCo's ``body_invweight0``,
    which MuJoCo recomputes when it compiles a model with other masses: writing
    ``body.<b>.mass`` gives the pairs (box–floor, finger–box) the weights of the file compiled
    with that mass (a free box: 1/m; the forearm: through the arm's mass matrix)."""
    import mujoco

    path = tmp_path / "arm.xml"
    path.write_text(_ARM_AND_BOX.format(mass=0.6))
    model = diffmb.load_mjcf(path)
    (el,) = [f for f in diffmb.mjcf_forces(path, contacts="constraint")
             if isinstance(f, diffmb.contacts.Contacts)]
    spec = mujoco.MjSpec.from_string(_ARM_AND_BOX.format(mass=0.6))
    spec.body(body).mass = mass  # (both bodies give their inertia: the mass alone changes)
    mj = spec.compile()
    _, f = set_params(model, {f"body.{body}.mass": mass}, {"contacts": el})
    iw = np.asarray(mj.body_invweight0)[:, 0]
    box, fore = mj.body("box").id, mj.body("fore").id
    pairs = [(el.geoms[a].name, el.geoms[b].name if k == "geom" else "floor")
             for a, k, b in el.pairs]
    want = {("box", "floor"): iw[box], ("finger", "box"): iw[fore] + iw[box]}
    got = dict(zip(pairs, np.asarray(f["contacts"].invweight), strict=True))
    assert set(want) == set(pairs)
    for key, w in want.items():
        assert got[key] == pytest.approx(w, rel=1e-9), key
    # and nothing follows a mass that is not written
    _, f0 = set_params(model, {"joint.shoulder.damping": 0.1}, {"contacts": el})
    np.testing.assert_array_equal(np.asarray(f0["contacts"].invweight), np.asarray(el.invweight))


def test_one_entry_of_a_force_field_is_a_scalar_parameter(tmp_path):
    path = tmp_path / "arm.xml"
    path.write_text(_ARM_AND_BOX.format(mass=0.6))
    model = diffmb.load_mjcf(path)
    (el,) = [f for f in diffmb.mjcf_forces(path, contacts="constraint")
             if isinstance(f, diffmb.contacts.Contacts)]
    forces = {"contacts": el}
    mu = np.asarray(el.mu).copy()
    ps = ParamSet(model, ["force.contacts.mu[1]"], forces)
    assert ps.params[0].shape == ()
    assert float(ps.get(model, forces)["force.contacts.mu[1]"]) == mu[1]
    _, f = ps.set(model, forces, {"force.contacts.mu[1]": 0.7})
    np.testing.assert_array_equal(np.asarray(f["contacts"].mu), [mu[0], 0.7])
    g = jax.grad(lambda x: jnp.sum(ps.set(model, forces, {"force.contacts.mu[1]": x},
                                          check=False)[1]["contacts"].mu ** 2))(0.5)
    assert float(g) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"force.contacts.mu\[1\]"):
        ps.set(model, forces, {"force.contacts.mu[1]": -0.1})
    with pytest.raises(KeyError, match="shape"):
        ParamSet(model, ["force.contacts.mu[2]"], forces)
