"""Loader behaviour on real files and on broken or unsafe ones: clear errors naming file and element."""

import warnings

import numpy as np
import pytest

import diffmb
from diffmb.io.urdf import rpy_to_matrix
from diffmb.model import InertiaWarning

from .oracles import erd_path

GOOD_LINK = ('<link name="{n}"><inertial><mass value="1"/>'
             '<inertia ixx="0.1" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/></inertial></link>')


def _urdf(tmp_path, body, name="r.urdf"):
    p = tmp_path / name
    p.write_text(f'<robot name="r">{body}</robot>')
    return p


def _joint(name, parent, child, jtype="revolute"):
    return (f'<joint name="{name}" type="{jtype}"><parent link="{parent}"/><child link="{child}"/>'
            '<axis xyz="0 0 1"/></joint>')


def test_real_urdfs_load_with_names_and_layout():
    m = diffmb.load_urdf(erd_path("g1_description/urdf/g1_29dof_rev_1_0.urdf"))
    assert m.nv == 29 and len(m.joint_names) == 29
    assert "left_knee_joint" in m.joint_names
    f = diffmb.load_urdf(erd_path("solo_description/robots/solo12.urdf"), floating_base=True)
    assert (f.nq, f.nv) == (19, 18) and f.joint_types[0] == "free"
    # continuous joints are plain angles (Pinocchio would use cos/sin, nq = 2)
    c = diffmb.load_urdf(erd_path("double_pendulum_description/urdf/double_pendulum_continuous.urdf"))
    assert c.nq == c.nv


def test_missing_mesh_is_not_an_error(tmp_path):
    body = (GOOD_LINK.format(n="a").replace("</link>", '<visual><geometry><mesh filename="nope.stl"/>'
            "</geometry></visual></link>") + GOOD_LINK.format(n="b") + _joint("j", "a", "b"))
    m = diffmb.load_urdf(_urdf(tmp_path, body))
    assert m.joint_names == ("j",)


@pytest.mark.parametrize(
    "body, message",
    [
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b") + _joint("j", "ghost", "b"),
         "parent link 'ghost' is not defined"),
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b") + GOOD_LINK.format(n="c")
         + _joint("j1", "a", "b") + _joint("j2", "b", "c") + _joint("j3", "c", "b"),
         "child of two joints"),
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b") + _joint("j1", "a", "b")
         + _joint("j2", "b", "a"), "cycle"),
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b").replace('value="1"', 'value="-2"')
         + _joint("j", "a", "b"), "negative mass"),
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b").replace('ixx="0.1"', 'ixx="-0.5"')
         + _joint("j", "a", "b"), "positive semi-definite"),
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b").replace('ixx="0.1"', 'ixx="nan"')
         + _joint("j", "a", "b"), "'b'.*(inertia has non-finite entries|ixx='nan'> is not finite)"),
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b").replace('value="1"', 'value="nan"')
         + _joint("j", "a", "b"), "'b'.*mass.*(must be finite|is not finite)"),
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b").replace('<mass value="1"/>', "")
         .replace('0.1"', '0"') + _joint("j", "a", "b"), "body 'b'.*mass matrix would be singular"),
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b") + _joint("j", "a", "b", "helical"),
         "unsupported joint type 'helical'"),
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b"), "several root links"),
    ],
)
def test_broken_urdf_errors_name_the_problem(tmp_path, body, message):
    p = _urdf(tmp_path, body)
    with pytest.raises(ValueError, match=message) as e:
        diffmb.load_urdf(p)
    assert str(p) in str(e.value)


def test_implausible_inertia_warns_and_strict_refuses(tmp_path):
    # a triangle-inequality violation (0.1 + 0.1 < 0.5) is implausible but harmless: Pinocchio loads it
    p = _urdf(tmp_path, GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b").replace(
        'izz="0.1"', 'izz="0.5"') + _joint("j", "a", "b"))
    with pytest.warns(InertiaWarning, match=r"body 'b': principal inertias \[0.1 0.1 0.5\] violate"
                      " the triangle inequality"):
        m = diffmb.load_urdf(p)
    np.testing.assert_allclose(np.asarray(m.body_inertia[1]), np.diag([0.1, 0.1, 0.5]))
    with pytest.raises(ValueError, match="triangle inequality.*strict=True") as e:
        diffmb.load_urdf(p, strict=True)
    assert str(p) in str(e.value) and "body 'b'" in str(e.value)


def test_builder_inertia_rules():
    def one(inertia, mass=1.0, strict=False, com=(0, 0.5, 0)):
        # a pendulum on a ball joint: the com offset keeps M regular when inertia has a zero eigenvalue
        b = diffmb.ModelBuilder(source="unit", strict=strict)
        b.add_body("x", mass=mass, com=com, inertia=inertia, joints=[dict(name="j", type="ball")])
        return b.build()

    # round-off negative eigenvalue (-1e-11 >= -1e-9 * max(1, trace)): warned, loaded
    with pytest.warns(InertiaWarning, match="body 'x'.*round-off"):
        one(np.array([[0.1, 0, 0], [0, 0.1, 0], [0, 0, -1e-11]]))
    with pytest.raises(ValueError, match="body 'x'.*round-off.*strict=True"):
        one(np.array([[0.1, 0, 0], [0, 0.1, 0], [0, 0, -1e-11]]), strict=True)
    # an exactly positive semi-definite inertia passes silently, also after a rotation
    R = rpy_to_matrix((0.3, -1.2, 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one(R @ np.diag([0.0, 0.2, 0.2]) @ R.T)
        one(R @ np.diag([0.1, 0.2, 0.25]) @ R.T, strict=True)
    # clearly negative eigenvalue (-1e-3 > 1e-9 * max(1, trace)): refused, naming the body
    with pytest.raises(ValueError, match="body 'x': inertia is not positive semi-definite"):
        one(np.diag([0.1, 0.1, -1e-3]))
    # negative mass and non-finite numbers: refused, naming the body
    with pytest.raises(ValueError, match="body 'x': mass must be finite and >= 0, got -1"):
        one(np.eye(3), mass=-1.0)
    with pytest.raises(ValueError, match="body 'x': inertia has non-finite"):
        one(np.diag([0.1, np.nan, 0.1]))
    with pytest.raises(ValueError, match="body 'x': com has non-finite"):
        one(np.eye(3), com=(0, np.inf, 0))
    # zero mass with inertia: a spatial inertia diag(I, 0) is still fine for a ball joint
    with pytest.warns(InertiaWarning, match="body 'x': zero mass with non-zero inertia"):
        one(np.eye(3), mass=0.0)


def test_builder_singular_mass_matrix_is_refused():
    def chain(m2, I2, com2=(0, 0, 0), armature=0.0, child=None):
        b = diffmb.ModelBuilder(source="unit")
        b.add_body("l1", mass=1.0, com=(0.5, 0, 0), inertia=[0.01, 0.1, 0.1],
                   joints=[dict(name="j1", type="hinge", axis=(0, 0, 1))])
        b.add_body("l2", "l1", pos=(1, 0, 0), mass=m2, com=com2, inertia=I2,
                   joints=[dict(name="j2", type="hinge", axis=(0, 0, 1), armature=armature)])
        if child is not None:
            b.add_body("l3", "l2", pos=(1, 0, 0), **child)
        return b.build()

    chain(1.0, [0.01, 0.1, 0.1], com2=(0.5, 0, 0))  # a good double pendulum
    # massless leaf on a joint (Romeo's fingers): M has a zero row and column
    with pytest.raises(ValueError, match="body 'l2', joint 'j2': the mass matrix would be singular"):
        chain(0.0, [0, 0, 0])
    # a massless subtree: the welded child has no mass either
    with pytest.raises(ValueError, match="joint 'j2': the mass matrix would be singular"):
        chain(0.0, [0, 0, 0], child=dict(mass=0.0))
    # a point mass on its own hinge axis: no inertia about the axis
    with pytest.raises(ValueError, match="joint 'j2': the mass matrix would be singular"):
        chain(1.0, [0, 0, 0])
    # ... but armature (reflected rotor inertia) or a welded massive child makes M regular
    chain(0.0, [0, 0, 0], armature=0.01)
    chain(0.0, [0, 0, 0], child=dict(mass=0.1))
    # a tiny but real finger next to a heavy arm is not singular
    chain(1e-6, [1e-12, 1e-12, 1e-12], com2=(0.01, 0, 0))


def test_clearly_negative_body_welded_into_a_valid_assembly_is_a_warning():
    # physically impossible for one body (Tiago's antenna), but the rigid assembly is valid
    b = diffmb.ModelBuilder(source="unit")
    b.add_body("arm", mass=2.0, inertia=[0.1, 0.1, 0.1], joints=[dict(name="j", type="hinge")])
    b.add_body("antenna", "arm", mass=1e-6, inertia=np.diag([-3.5e-8, 3.5e-8, 9e-8]))
    with pytest.warns(InertiaWarning, match="body 'antenna': inertia is not positive semi-definite"
                      ".*rigid assembly \\['arm', 'antenna'\\] moved by joint 'j' is positive"):
        b.build()
    b.strict = True
    with pytest.raises(ValueError, match="body 'antenna'.*strict=True"):
        b.build()
    # the same body alone on its joint: refused
    b = diffmb.ModelBuilder(source="unit")
    b.add_body("arm", mass=2.0, inertia=[0.1, 0.1, 0.1], joints=[dict(name="j", type="hinge")])
    b.add_body("antenna", "arm", mass=1e-3, inertia=np.diag([-0.01, 0.1, 0.1]),
               joints=[dict(name="k", type="ball")])
    with pytest.raises(ValueError, match="body 'antenna': inertia is not positive semi-definite.*"
                       "joint 'k'"):
        b.build()


def test_mjcf_strict_keyword(tmp_path):
    p = tmp_path / "m.xml"
    p.write_text('<mujoco><worldbody><body><joint type="hinge"/><geom size="0.1" mass="1"/>'
                 "</body></worldbody></mujoco>")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert diffmb.load_mjcf(p, strict=True).nv == 1


def test_malformed_and_unsafe_xml(tmp_path):
    bad = tmp_path / "bad.urdf"
    bad.write_text('<robot name="r"><link name="a"></robot>')
    with pytest.raises(ValueError, match="malformed XML") as e:
        diffmb.load_urdf(bad)
    assert str(bad) in str(e.value)
    bomb = tmp_path / "bomb.urdf"
    bomb.write_text('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
                    '<!ENTITY lol2 "&lol;&lol;&lol;&lol;">]><robot name="&lol2;"/>')
    with pytest.raises(ValueError, match="unsafe XML"):
        diffmb.load_urdf(bomb)
    with pytest.raises(ValueError, match="unsafe XML"):
        diffmb.load_mjcf(bomb)
    with pytest.raises(FileNotFoundError):
        diffmb.load_urdf(tmp_path / "missing.urdf")


def test_mjcf_errors(tmp_path):
    p = tmp_path / "m.xml"
    p.write_text('<mujoco><worldbody><body><joint type="hinge"/><geom size="0.1" mass="-1"/>'
                 "</body></worldbody></mujoco>")
    with pytest.raises(ValueError, match=str(p)):
        diffmb.load_mjcf(p)
    q = tmp_path / "q.xml"
    q.write_text('<mujoco><worldbody><body><joint type="screw"/><geom size="0.1"/>'
                 "</body></worldbody></mujoco>")
    with pytest.raises(ValueError, match="could not compile"):
        diffmb.load_mjcf(q)


def test_builder_names_the_body():
    b = diffmb.ModelBuilder(source="unit")
    with pytest.raises(ValueError, match="body 'x': inertia is not symmetric"):
        b.add_body("x", mass=1.0, inertia=np.array([[1, 0.5, 0], [0, 1, 0], [0, 0, 1]]),
                   joints=[dict(name="j", type="hinge")])
    with pytest.raises(ValueError, match="unknown type 'planar'"):
        b.add_body("y", mass=1.0, inertia=np.eye(3), joints=[dict(name="j", type="planar")])


def test_loaders_record_the_file_not_its_name(tmp_path):
    """Model.source is the file's own path and SHA-256 (hashlib on its bytes), static data of
    the model: two URDFs of one stem in two folders keep theirs; a model built in Python has
    none."""
    import hashlib

    import equinox as eqx

    sources = []
    for d, mass in (("a", "9"), ("b", "1")):
        (tmp_path / d).mkdir()
        body = (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b").replace('value="1"',
                                                                         f'value="{mass}"')
                + _joint("j", "a", "b"))
        text = f'<robot name="r">{body}</robot>'
        f = tmp_path / d / "r.urdf"
        f.write_text(text)
        m = diffmb.load_urdf(f)
        assert m.source == diffmb.ModelSource(str(f.resolve()), hashlib.sha256(text.encode())
                                              .hexdigest(), "urdf", False)
        assert float(m.body_mass[m.body_index("b")]) == float(mass)
        sources.append(m.source)
        # static: a changed parameter keeps it, and jit sees it in the tree structure
        assert eqx.tree_at(lambda x: x.body_mass, m, m.body_mass + 1).source == m.source
    assert sources[0] != sources[1]
    b = diffmb.ModelBuilder("hand")
    b.add_body("a", mass=1.0, inertia=[0.1, 0.1, 0.1], joints=[dict(name="j", type="hinge")])
    assert b.build().source is None
