"""Loader behaviour on real files and on broken or unsafe ones: clear errors naming file and element."""

import numpy as np
import pytest

import diffmb

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
        (GOOD_LINK.format(n="a") + GOOD_LINK.format(n="b").replace('izz="0.1"', 'izz="0.5"')
         + _joint("j", "a", "b"), "triangle inequality"),
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
