"""diffmb.modular: configurations of modules built from their connection graph.

Oracles: matrices written out by hand from the paper's Definitions 1–2 (Xu et al. 2018, §2),
the hand-written ``underwater_quadruped.xml``, and MuJoCo's ``qacc`` on the MJCF export."""

import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.models import underwater as uw
from diffmb.modular import Configuration, Connection, Geom, Joint, Module, Port

from .oracles import rel_err


def _small_module(name="link", ports=("a", "b", "c")):
    hinge = Joint("hinge", (0, 0, 1), damping=0.1, armature=0.01)
    return Module(name, (Geom("box", (0.2, 0.05, 0.05), 2.0, pos=(0.2, 0, 0)),),
                  tuple(Port(p, (0.4 * k, 0.05 * k, 0), joint=hinge) for k, p in enumerate(ports)))


def _tree5():
    """s0 → s1, s0 → s2, s2 → s3, s2 → s4 (connections given in mixed directions)."""
    m = _small_module()
    return Configuration({f"s{k}": m for k in range(5)},
                         [("s0", "b", "s1", "a"), ("s4", "a", "s2", "c"), ("s0", "c", "s2", "a"),
                          Connection("s2", "b", "s3", "a", "rigid")], "s0")


def _root_in_the_middle():
    """Root s1 (not the first module): s1 → s0 (connection written s0 → s1), s1 → s2 welded,
    s2 → s3; floating in water."""
    m = _small_module()
    return Configuration({f"s{k}": m for k in range(4)},
                         [("s0", "a", "s1", "b", "joint", "hip"), ("s1", "c", "s2", "a", "rigid"),
                          ("s2", "b", "s3", "a")], "s1", root_port="c", pos=(0.1, -0.2, 2.0),
                         quat=(0.8, 0.2, -0.3, 0.1), density=1000.0, viscosity=1e-3)


def test_matrices_by_hand():
    """Definition 1: A[i, j] = 1 iff a directed path leads from s_i to s_j; terminal modules
    s1, s3, s4 (zero rows); Definition 2: their paths {s0 s1}, {s0 s2 s3}, {s0 s2 s4}."""
    cfg = _tree5()
    A = [[0, 1, 1, 1, 1],
         [0, 0, 0, 0, 0],
         [0, 0, 0, 1, 1],
         [0, 0, 0, 0, 0],
         [0, 0, 0, 0, 0]]
    P = [[1, 1, 0, 0, 0],
         [1, 0, 1, 1, 0],
         [1, 0, 1, 0, 1]]
    assert cfg.accessibility_matrix().dtype.kind == "i"
    assert cfg.accessibility_matrix().tolist() == A
    assert cfg.path_matrix().dtype.kind == "i" and cfg.path_matrix().tolist() == P
    assert cfg.graph == ((0, 1, "joint"), (2, 4, "joint"), (0, 2, "joint"), (2, 3, "rigid"))
    mid = _root_in_the_middle()  # paths {s1 s0}, {s1 s2 s3}; columns s0 … s3
    assert mid.accessibility_matrix().tolist() == [[0, 0, 0, 0], [1, 0, 1, 1], [0, 0, 0, 1],
                                                   [0, 0, 0, 0]]
    assert mid.path_matrix().tolist() == [[1, 1, 0, 0], [0, 1, 1, 1]]


def test_papers_configurations_agree_with_their_graphs():
    quad, nine = uw.quadruped_configuration(), uw.nine_module_configuration()
    assert sorted(quad.graph) == sorted(uw.QUADRUPED_GRAPH)
    assert sorted(nine.graph) == sorted(uw.NINE_MODULE_GRAPH)
    assert np.array_equal(quad.path_matrix(), uw.path_matrix(uw.QUADRUPED_GRAPH))
    assert np.array_equal(nine.path_matrix(), uw.path_matrix(uw.NINE_MODULE_GRAPH))
    snake = uw.snake_configuration(4)
    assert snake.path_matrix().tolist() == [[1, 1, 1, 1]]
    assert snake.accessibility_matrix().tolist() == [[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1],
                                                     [0, 0, 0, 0]]


@pytest.mark.parametrize("conns, match", [
    ([("s0", "b", "s1", "a"), ("s1", "b", "s2", "a"), ("s2", "b", "s0", "c")],
     r"connection 2 \(s2.b -> s0.c\) closes a cycle: .*'s2' and 's0'"),
    ([("s0", "b", "s1", "a"), ("s0", "b", "s2", "a")], r"port s0.b is used twice"),
    ([("s0", "b", "s1", "a"), ("s1", "b", "s9", "a")], r"unknown module 's9'"),
    ([("s0", "b", "s1", "a"), ("s1", "x", "s2", "a")], r"module 's1' .* has no port 'x'"),
    ([("s0", "b", "s1", "a")], r"module 's2' is not connected to the root 's0'"),
    ([("s0", "b", "s1", "a"), ("s1", "b", "s1", "c")], r"closes a cycle: modules 's1' and 's1'"),
    ([("s0", "b", "s1", "a"), ("s1", "b", "s2", "a", "glued")], r"kind 'glued'"),
])
def test_invalid_graphs_are_refused_naming_module_and_port(conns, match):
    m = _small_module()
    with pytest.raises(ValueError, match=match):
        Configuration({"s0": m, "s1": m, "s2": m}, conns, "s0")


def test_joint_on_a_port_without_joint_and_bad_numbers_are_refused():
    rigid_only = Module("plate", (Geom("sphere", (0.1,), 1.0),), (Port("p"),))
    m = _small_module()
    with pytest.raises(ValueError, match=r"port s0.p offers no joint"):
        Configuration({"s0": rigid_only, "s1": m}, [("s1", "a", "s0", "p")], "s0")
    Configuration({"s0": rigid_only, "s1": m}, [("s0", "p", "s1", "a", "rigid")], "s0")
    with pytest.raises(ValueError, match=r"unknown module 'base'"):
        Configuration({"s0": m}, [], "base")
    with pytest.raises(ValueError, match=r"root_port: module 's0' .* has no port 'z'"):
        Configuration({"s0": m}, [], "s0", root_port="z")
    with pytest.raises(ValueError, match=r"mass = -1.0"):
        Geom("box", (0.1, 0.1, 0.1), -1.0)
    with pytest.raises(ValueError, match=r"size .* must be > 0"):
        Geom("box", (0.1, 0.0, 0.1), 1.0)
    with pytest.raises(ValueError, match=r"not finite"):
        Geom("sphere", (np.nan,), 1.0)
    with pytest.raises(ValueError, match=r"range \(1.0, -1.0\)"):
        Joint(range=(1.0, -1.0))
    with pytest.raises(ValueError, match=r"axis .* non-zero"):
        Joint(axis=(0, 0, 0))
    with pytest.raises(ValueError, match=r"port 'a' is defined twice"):
        Module("dup", (Geom("sphere", (0.1,), 1.0),), (Port("a"), Port("a")))
    with pytest.raises(ValueError, match=r"joint name 'hip' is used by two connections"):
        Configuration({"s0": m, "s1": m, "s2": m}, [("s0", "b", "s1", "a", "joint", "hip"),
                                                    ("s1", "b", "s2", "a", "joint", "hip")], "s0")
    with pytest.raises(ValueError, match=r"module instance name 'a b'"):
        Configuration({"a b": m}, [], "a b")
    with pytest.raises(ValueError, match=r"fluid='potential' needs a fluid density"):
        Configuration({"s0": m}, [], "s0").build(fluid="potential")
    with pytest.raises(ValueError, match=r"has no degree of freedom"):
        Configuration({"s0": m, "s1": m}, [("s0", "b", "s1", "a", "rigid")], "s0",
                      floating=False)
    with pytest.raises(ValueError, match=r"connection s1-s2: no ports given"):
        Configuration.from_graph(((0, 1, "joint"), (1, 2, "joint")), m, {(0, 1): ("b", "a")})
    with pytest.raises(ValueError, match=r"module 's1' .* has no port 'q'"):
        Configuration.from_graph(((0, 1, "joint"),), m, {(0, 1): ("b", "q")})
    with pytest.raises(ValueError, match=r"density = -1"):
        Configuration({"s0": m}, [], "s0", density=-1)


def _qacc(model, forces, q, v, u):
    a = diffmb.forward(model, q, v, forces=forces, ctrl=u if u.shape[0] else None)
    return a[0] if isinstance(a, tuple) else a  # (a, state rates) with stateful contacts


def _random_state(model, rng, z=3.0):
    q = np.array(model.qpos0, float)
    q[:3] = rng.normal(size=3) * 0.3 + (0, 0, z)
    quat = rng.normal(size=4)
    q[3:7] = quat / np.linalg.norm(quat)
    q[7:] = rng.uniform(-1.2, 1.2, size=model.nq - 7)
    return q, rng.normal(size=model.nv)


def _compare_with_file(with_contacts):
    """max rel_err of (M, bias force, qacc with the servos, drag, buoyancy and added mass, and
    the floor contacts if ``with_contacts``) of the generated quadruped against the file's."""
    model, forces = uw.quadruped_configuration().build()
    ref, ref_forces = uw.load()
    assert model.joint_names == ref.joint_names and model.body_names == ref.body_names
    assert (model.nq, model.nv) == (ref.nq, ref.nv)
    assert [type(f).__name__ for f in forces] == [type(f).__name__ for f in ref_forces]
    if not with_contacts:  # then the two are one structure for jit: one compilation
        forces, ref_forces = ([f for f in fs if not isinstance(f, diffmb.contacts.Contacts)]
                              for fs in (forces, ref_forces))
        model = dataclasses.replace(model, source=ref.source)
    rng = np.random.default_rng(0)
    f = jax.jit(lambda m, fs, q, v, u: (diffmb.mass_matrix(m, q), diffmb.bias_force(m, q, v),
                                        _qacc(m, fs, q, v, u)))
    err = 0.0
    for z in (3.0, 0.9, 0.8) if with_contacts else (3.0, 2.0, 1.0):  # 0.8, 0.9: feet in the floor
        q, v = _random_state(ref, rng, z)
        u = rng.normal(size=8) * 0.3
        out = f(model, forces, jnp.asarray(q), jnp.asarray(v), jnp.asarray(u))
        exp = f(ref, ref_forces, jnp.asarray(q), jnp.asarray(v), jnp.asarray(u))
        err = max(err, *(rel_err(np.asarray(a), np.asarray(b))
                         for a, b in zip(out, exp, strict=True)))
    return err


def test_generated_quadruped_is_the_hand_written_file():
    """Same mass matrix, bias force and accelerations as ``underwater_quadruped.xml`` on random
    states, to 1e-9; the generated legs' body frames are turned about the hinge axes (module
    frames along the leg), which changes no generalized quantity."""
    assert _compare_with_file(with_contacts=False) < 1e-9


@pytest.mark.slow
def test_generated_quadruped_touches_the_floor_as_the_file():
    assert _compare_with_file(with_contacts=True) < 1e-9


def _mujoco_rel_err(cfg, n_states, seed, path, z=3.0):
    """max over random states of rel_err(diffmb.forward, MuJoCo's qacc) with MuJoCo's fluid
    model, the servos driven by random controls."""
    model, forces = cfg.build(fluid="mujoco")
    cfg.to_mjcf(path)  # the file MuJoCo reads
    mj = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(seed)
    f = jax.jit(lambda q, v, u: _qacc(model, forces, q, v, u))
    err = 0.0
    for _ in range(n_states):
        q, v = _random_state(model, rng, z)
        u = rng.normal(size=mj.nu) * 0.3
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, d)
        assert d.ncon == 0
        a = np.asarray(f(jnp.asarray(q), jnp.asarray(v), jnp.asarray(u)))
        err = max(err, rel_err(a, d.qacc))
    return err


CONFIGURATIONS = {"quadruped": uw.quadruped_configuration,
                  "nine_module": uw.nine_module_configuration,
                  "snake": lambda: uw.snake_configuration(5), "root_in_the_middle": _root_in_the_middle}


@pytest.mark.parametrize("name", [  # the quadruped also equals its file (fast test above)
    pytest.param("quadruped", marks=pytest.mark.slow), "nine_module", "snake",
    "root_in_the_middle"])
def test_mjcf_export_matches_mujoco(name, tmp_path):
    cfg = CONFIGURATIONS[name]()
    assert _mujoco_rel_err(cfg, 3, 1, tmp_path / f"{name}.xml") < 1e-6


def test_small_configuration_with_limits_matches_mujoco():
    """A fixed-base tree of the small module: slide and hinge ports, a servo, limits (states
    inside them), no fluid."""
    hinge = Joint("hinge", (0, 1, 1), range=(-2.0, 2.0), damping=0.3, armature=0.02, kp=5.0,
                  kv=0.5)
    slide = Joint("slide", (1, 0, 0), range=(-0.5, 0.5), damping=0.2, stiffness=3.0)
    arm = Module("arm", (Geom("capsule", (0.04, 0.15), 1.5, pos=(0.15, 0, 0),
                              quat=(np.sqrt(0.5), 0, np.sqrt(0.5), 0)),
                         Geom("cylinder", (0.05, 0.02), 0.5, pos=(0.3, 0, 0))),
                 (Port("in", quat=(0, 0, 0, 1), joint=hinge),
                  Port("out", (0.3, 0, 0), joint=hinge),
                  Port("side", (0.1, 0, 0.05), (np.sqrt(0.5), 0, -np.sqrt(0.5), 0), slide)))
    cfg = Configuration({"s0": arm, "s1": arm, "s2": arm, "s3": arm},
                        [("s0", "out", "s1", "in"), ("s0", "side", "s2", "in"),
                         ("s1", "side", "s3", "in")], "s0", floating=False,
                        pos=(0, 0, 1), quat=(0.9, 0.1, 0.3, 0.2))
    model, forces = cfg.build(fluid=False)
    mj = mujoco.MjModel.from_xml_string(cfg.to_mjcf())
    assert (model.nq, mj.nu) == (3, 1)
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(2)
    f = jax.jit(lambda q, v, u: _qacc(model, forces, q, v, u))
    for _ in range(3):
        q = rng.uniform(-0.4, 0.4, size=3)
        v, u = rng.normal(size=3), rng.normal(size=1)
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, d)
        a = f(jnp.asarray(q), jnp.asarray(v), jnp.asarray(u))
        assert rel_err(np.asarray(a), d.qacc) < 1e-6


def test_kane_support_is_read_off_the_paths():
    """The quadruped's left fore shin s3 is moved by the free joint and hip_lf, knee_lf only;
    the welded s1 by the free joint only (written from the paths s0 s1 s2 s3 | s0 s6 s7)."""
    cfg = uw.quadruped_configuration()
    model, _ = cfg.build(fluid=False)
    S = cfg.kane_support(model)
    names = ["root"] * 6 + [model.joint_names[j] for j in range(1, 9)]
    b = model.body_names.index
    assert [n for n, s in zip(names, S[b("s3")], strict=True) if s] == ["root"] * 6 + [
        "hip_lf", "knee_lf"]
    assert S[b("s1")].tolist() == [1] * 6 + [0] * 8
    assert [n for n, s in zip(names, S[b("s7")], strict=True) if s] == ["root"] * 6 + [
        "hip_lh", "knee_lh"]


@pytest.mark.parametrize("name", ["root_in_the_middle", *(
    pytest.param(n, marks=pytest.mark.slow) for n in ("quadruped", "nine_module", "snake"))])
def test_kane_along_the_paths_equals_aba(name):
    """Kane's equations with partial velocities from the path matrix, with potential-flow added
    inertia, against ABA on random states and torques, to 1e-9 relative."""
    cfg = CONFIGURATIONS[name]()
    model, _ = cfg.build()
    assert model.has_added_inertia
    rng = np.random.default_rng(4)
    # the speeds that move each body, read off the paths: the modules' and the Model's agree
    # with the support table the other algorithms use
    from diffmb.dynamics._world import topology as tables
    from diffmb.dynamics.kane import path_support

    tab = tables(model)
    anc = tab.anc[tab.body_pos_idx][:, tab.dof_node] * (tab.body_pos_idx >= 0)[:, None]
    assert np.array_equal(cfg.kane_support(model), anc)
    assert np.array_equal(path_support(model), anc)
    run = jax.jit(lambda q, v, t, f: (
        cfg.kane_forward_dynamics(model, q, v, t, f),
        diffmb.forward_dynamics(model, q, v, t, f, method="kane_paths"),
        diffmb.forward_dynamics(model, q, v, t, f, method="aba")))
    for _ in range(3):
        q, v = _random_state(model, rng)
        tau = rng.normal(size=model.nv) * 10.0
        f_ext = rng.normal(size=(model.n_bodies, 6))
        kane, kane_paths, aba = run(jnp.asarray(q), jnp.asarray(v), jnp.asarray(tau),
                                    jnp.asarray(f_ext))
        assert rel_err(np.asarray(kane), np.asarray(aba)) < 1e-9
        assert rel_err(np.asarray(kane_paths), np.asarray(aba)) < 1e-9


@pytest.mark.slow
def test_simulate_with_kane_along_the_paths():
    """``simulate(method="kane_paths")``: the nine-module robot sinking with its servos holding
    zero, 0.2 s of RK4, the same trajectory as with ABA to 1e-9."""
    model, forces = uw.nine_module_configuration().build()
    q0, v0 = jnp.asarray(model.qpos0), jnp.asarray(np.linspace(-0.5, 0.5, model.nv))
    def hold(t, q, v, params):
        return jnp.zeros(8)

    runs = [diffmb.simulate(model, q0, v0, t1=0.2, dt=0.002, forces=forces, method=m,
                            control=hold, saveat=[0.1, 0.2]) for m in ("aba", "kane_paths")]
    assert rel_err(np.asarray(runs[1].q), np.asarray(runs[0].q)) < 1e-9


@pytest.mark.slow  # ~40 s: 3 s of swimming
def test_snake_swims_with_a_travelling_wave_and_matches_mujoco_on_its_way():
    """A five-module snake (potential flow, the study's model) driven by a travelling wave from
    s0 to the tail swims towards s0 (−x) while it sinks (net weight 3.4 N per module); at the
    states it passes through, MuJoCo's qacc on the MJCF export (its own fluid model) and
    diffmb's with ``fluid="mujoco"`` agree to 1e-6."""
    cfg = uw.snake_configuration(5)
    model, forces = cfg.build()
    cpg = uw.snake_cpg(5, amplitude=0.5, frequency=0.5)
    ts = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    tr = diffmb.simulate(model, jnp.asarray(model.qpos0), jnp.zeros(model.nv), t1=3.0,
                         dt=0.001, forces=forces, control=cpg, saveat=ts)
    q, v = np.asarray(tr.q), np.asarray(tr.v)
    assert q[-1, 0] < -0.2 and abs(q[-1, 1]) < 1e-9 and q[-1, 2] < cfg.pos[2]
    mj_model, mj_forces = cfg.build(fluid="mujoco")
    mj = cfg.mjmodel()
    d = mujoco.MjData(mj)
    f = jax.jit(lambda q, v, u: _qacc(mj_model, mj_forces, q, v, u))
    w = 2 * np.pi * 0.5
    for k, t in enumerate(ts):
        u = 0.5 * np.cos(w * t + np.asarray(cpg.phase_lags))  # the CPG's pattern at t
        d.qpos[:], d.qvel[:], d.ctrl[:] = q[k], v[k], u
        mujoco.mj_forward(mj, d)
        a = f(jnp.asarray(q[k]), jnp.asarray(v[k]), jnp.asarray(u))
        assert rel_err(np.asarray(a), d.qacc) < 1e-6


def test_locking_a_joint_keeps_the_pose_and_the_momentum_and_releasing_undoes_it():
    """A four-module snake in water locks joint j2 where it stands (an inelastic impact): every
    body keeps its pose, the total linear and angular momentum (bodies and the fluid's impulse)
    are unchanged to 1e-9 and kinetic energy is lost; releasing the weld again gives back the
    locked state's motion with j2 at the welded angle."""
    cfg = uw.snake_configuration(4)
    model, _ = cfg.build()
    rng = np.random.default_rng(5)
    q, v = _random_state(model, rng)

    def pose_momentum_energy(m, q, v):
        R, p = diffmb.body_poses(m, q)
        return R, p, *diffmb.momentum(m, q, v), diffmb.kinetic_energy(m, q, v)

    f = jax.jit(pose_momentum_energy)
    locked, q1, v1 = cfg.lock("j2", model, q, v)
    model1, _ = locked.build()
    assert model1.joint_names == ("root", "j1", "j3") and q1.shape == (model.nq - 1,)
    assert [c.kind for c in locked.connections] == ["joint", "rigid", "joint"]
    before, after = f(model, q, v), f(model1, jnp.asarray(q1), jnp.asarray(v1))
    for a, b in zip(before[:4], after[:4], strict=True):
        assert rel_err(np.asarray(b), np.asarray(a)) < 1e-9
    assert float(after[4]) < float(before[4])
    released, insert = locked.release(1, "j2")
    q2, v2 = insert(q1, v1)
    model2, _ = released.build()
    assert model2.joint_names == model.joint_names and abs(q2[8] - q[8]) < 1e-15
    again = f(model2, jnp.asarray(q2), jnp.asarray(v2))
    for a, b in zip(after, again, strict=True):
        assert rel_err(np.asarray(b), np.asarray(a)) < 1e-9
    with pytest.raises(ValueError, match=r"has no joint 'j9'"):
        cfg.lock("j9", model, q, v)
    with pytest.raises(ValueError, match=r"is not rigid"):
        cfg.release(0)


def _two_snakes(port_b=("b0", "a"), gap=(0.004, -0.003, 0.002), tilt=0.03):
    """Two two-module snakes a0–a1 and b0–b1 in sea water; a at a random pose and joint angle,
    b (joint at 0.4 rad) placed so that its port ``port_b`` sits ``gap`` (m, in a1.b's frame)
    from a1's end port a1.b, turned by ``tilt`` rad from the mated pose; random speeds."""
    from diffmb.modular import _FLIP, _quat, _rot, module_frames

    m = uw.module()
    kw = dict(density=uw.RHO, viscosity=uw.VISCOSITY)
    a = Configuration({"a0": m, "a1": m}, [("a0", "b", "a1", "a", "joint", "ja")], "a0", **kw)
    b = Configuration({"b0": m, "b1": m}, [("b0", "b", "b1", "a", "joint", "jb")], "b0", **kw)
    ma, _ = a.build(fluid=False)
    mb, _ = b.build(fluid=False)
    rng = np.random.default_rng(7)
    qa, _ = _random_state(ma, rng, z=2.0)
    Ra, pa = module_frames(a, ma, qa)["a1"]
    P = m.port("b")
    Rp, pp = Ra @ P.rot, pa + Ra @ np.asarray(P.pos)
    h = 0.5 * tilt  # about (1, 1, 1)/√3
    Rc = Rp @ _rot("", (np.cos(h), *np.full(3, np.sin(h) / np.sqrt(3.0)))) @ _FLIP
    pc = pp + Rp @ np.asarray(gap)
    # b with its root at the origin, then moved rigidly to put port_b at (Rc, pc)
    qb = np.array([0, 0, 0, 1.0, 0, 0, 0, 0.4])
    R0, p0 = module_frames(b, mb, qb)[port_b[0]]
    C = m.port(port_b[1])
    R0, p0 = R0 @ C.rot, p0 + R0 @ np.asarray(C.pos)
    Rt = Rc @ R0.T
    qb[:3], qb[3:7] = pc - Rt @ p0, _quat(Rt)
    return (a, ma, qa, rng.normal(size=ma.nv)), (b, mb, qb, rng.normal(size=mb.nv))


def _mujoco_momentum(cfg, q, v):
    """Linear momentum (3,), angular momentum about the world origin (3,), kinetic energy and
    every body's (name: (com, ω, ċ)), summed body by body from MuJoCo's masses, inertias and
    body velocities at the centres of mass (no added mass)."""
    mj = cfg.mjmodel()
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = q, v
    mujoco.mj_forward(mj, d)
    lin, ang, ke, bodies = np.zeros(3), np.zeros(3), 0.0, {}
    vel = np.zeros(6)
    for i in range(1, mj.nbody):
        mujoco.mj_objectVelocity(mj, d, mujoco.mjtObj.mjOBJ_BODY, i, vel, 0)
        w, cd = vel[:3].copy(), vel[3:].copy()
        R = d.ximat[i].reshape(3, 3)
        Iw = R @ np.diag(mj.body_inertia[i]) @ R.T
        m, c = mj.body_mass[i], d.xipos[i].copy()
        lin += m * cd
        ang += np.cross(c, m * cd) + Iw @ w
        ke += 0.5 * (m * cd @ cd + w @ Iw @ w)
        bodies[mj.body(i).name] = (c, w, cd)
    ke += 0.5 * float(np.sum(mj.dof_armature * v * v))
    return lin, ang, ke, bodies


@pytest.mark.slow  # 5–20 s: compiles the kinematics of seven models
@pytest.mark.parametrize("port_b", [("b0", "a"), ("b1", "b")])
def test_docking_two_robots_keeps_momentum_and_undocking_every_motion(port_b):
    """Two free snakes whose ports meet 5 mm and 0.03 rad from the mated pose dock into one
    robot (a weld where they stand, an inelastic impact): every module keeps its centre of
    mass, the total linear and angular momentum summed from MuJoCo's body masses, inertias and
    velocities is the same before and after to 1e-9, kinetic energy is lost; undocking at the
    weld gives two robots whose modules keep the docked robot's motion. Docking at b1's end
    turns b's connection round: its joint is then b1.a's hinge, about b1's −y (b1.a's frame is
    turned by π about z), where b0 stands turned by −0.4 rad about b1's y: again 0.4 rad."""
    from diffmb.modular import dock, port_gap, undock

    ra, rb = _two_snakes(port_b)
    dist, ang = port_gap(ra, ("a1", "b"), rb, port_b)
    assert abs(dist - np.linalg.norm([0.004, -0.003, 0.002])) < 1e-12 and abs(ang - 0.03) < 1e-9
    cfg, q, v = dock(ra, rb, ("a1", "b"), port_b)
    assert cfg.names == ("a0", "a1", "b0", "b1") and cfg.connections[-1].kind == "rigid"
    model, _ = cfg.build(fluid=False)
    assert model.joint_names == ("root", "ja", "jb")
    assert abs(q[8] - 0.4) < 1e-12
    la, aa, ka, ba = _mujoco_momentum(ra[0], ra[2], ra[3])
    lb, ab, kb, bb = _mujoco_momentum(rb[0], rb[2], rb[3])
    lin, ang, ke, bd = _mujoco_momentum(cfg, q, v)
    scale = max(1.0, np.abs(np.concatenate([la + lb, aa + ab])).max())
    assert np.abs(lin - (la + lb)).max() < 1e-9 * scale
    assert np.abs(ang - (aa + ab)).max() < 1e-9 * scale
    assert ke < ka + kb
    for n, (c, _, _) in {**ba, **bb}.items():
        assert np.abs(bd[n][0] - c).max() < 1e-12
    # the weld holds port_b's module to a1: the same angular velocity
    assert np.abs(bd["a1"][1] - bd[port_b[0]][1]).max() < 1e-9
    # undock at the weld: each module keeps its motion
    (c1, q1, v1), (c2, q2, v2) = undock((cfg, model, q, v), 2, names=("left", "right"))
    assert c1.names == ("a0", "a1") and set(c2.names) == {"b0", "b1"} and c2.root == port_b[0]
    l1, a1, _, b1 = _mujoco_momentum(c1, q1, v1)
    l2, a2, _, b2 = _mujoco_momentum(c2, q2, v2)
    assert np.abs(l1 + l2 - lin).max() < 1e-9 * scale
    assert np.abs(a1 + a2 - ang).max() < 1e-9 * scale
    for n, x in {**b1, **b2}.items():
        assert max(np.abs(y - z).max() for y, z in zip(x, bd[n], strict=True)) < 1e-9
    # refusals
    far = (rb[0], rb[1], rb[2] + np.r_[0.05, 0, 0, 0, 0, 0, 0, 0], rb[3])
    with pytest.raises(ValueError, match=r"a1.b and b\d.[ab] are 0.0\d+ m .* from mating"):
        dock(ra, far, ("a1", "b"), port_b)
    with pytest.raises(ValueError, match=r"module 'a0' is in both"):
        dock(ra, ra, ("a1", "b"), ("a0", "a"), tol=10, angle_tol=10)
    with pytest.raises(ValueError, match=r"welds its ports apart"):
        cfg.release(2)
    with pytest.raises(ValueError, match=r"port a1.z of 'modular': module 'a1' .* no port 'z'"):
        dock(ra, rb, ("a1", "z"), port_b)
    with pytest.raises(ValueError, match=r"port_b: expected \(instance, port\)"):
        dock(ra, rb, ("a1", "b"), "b0.a")


@pytest.mark.parametrize("root", ["s0", "s1"])
def test_rigid_weld_with_an_offset_places_the_child_as_its_ports_say(root):
    """A weld with ``offset`` (x, y, z, quat): MuJoCo's world poses of the two modules on the
    MJCF export put port s1.a at s0.b · offset · (π about z), whichever module is the root (the
    connection turned round in the tree when it is s1)."""
    from diffmb.modular import _FLIP, _rot

    m = _small_module()
    off = (0.01, -0.02, 0.03, np.cos(0.1), np.sin(0.1), 0.0, 0.0)  # 0.2 rad about x
    cfg = Configuration({"s0": m, "s1": m}, [Connection("s0", "b", "s1", "a", "rigid",
                                                        offset=off)], root,
                        pos=(0.3, -0.1, 0.5), quat=(0.9, 0.1, -0.2, 0.3))
    mj = cfg.mjmodel()
    d = mujoco.MjData(mj)
    mujoco.mj_kinematics(mj, d)

    def port(body, name):
        R, p = d.xmat[mj.body(body).id].reshape(3, 3), d.xpos[mj.body(body).id]
        P = m.port(name)
        return R @ P.rot, p + R @ np.asarray(P.pos)

    (Rp, pp), (Rc, pc) = port("s0", "b"), port("s1", "a")
    assert np.abs(Rc - Rp @ _rot("", off[3:]) @ _FLIP).max() < 1e-12
    assert np.abs(pc - (pp + Rp @ np.asarray(off[:3]))).max() < 1e-12
    with pytest.raises(ValueError, match=r"an offset needs a 'rigid' connection"):
        Configuration({"s0": m, "s1": m}, [Connection("s0", "b", "s1", "a", offset=off)], "s0")


def _curled_snake(n=4, seed=3):
    """A snake of ``n`` underwater modules (no fluid) curled nearly into a ring: every joint at
    2π/n plus a few mrad, its end ports s{n−1}.b and s0.a a few mm apart; random pose and
    speeds."""
    cfg = uw.snake_configuration(n)
    model, _ = cfg.build(fluid=False)
    rng = np.random.default_rng(seed)
    q, _ = _random_state(model, rng, z=2.0)
    q[7:] = 2 * np.pi / n + 0.004 * np.arange(n - 1)
    return cfg, model, q, rng.normal(size=model.nv)


def test_closing_a_ring_keeps_momentum_and_welds_the_ports_where_they_stand():
    """close_loop on a snake curled into a ring: MuJoCo, on the MJCF export of the closed
    configuration, finds the two weld sites coinciding (efc_pos of the weld = 0) and moving
    with the same twist afterwards; the total linear and angular momentum summed from MuJoCo's
    body masses, inertias and velocities are the same before and after to 1e-9; kinetic energy
    is lost (an inelastic impact). Opening the loop gives back the snake with the same state."""
    from diffmb.modular import close_loop, loop_gap

    cfg, model, q, v = _curled_snake()
    ends = ("s3", "b"), ("s0", "a")
    dist, ang, theta = loop_gap((cfg, model, q, v), *ends)
    assert 1e-3 < dist < 0.02 and ang < 1e-12 and abs(theta - np.pi / 2) < 0.05
    ring, q1, v1 = close_loop((cfg, model, q, v), *ends, name="ring")
    assert np.array_equal(q1, q) and [c.name for c in ring.loops] == ["ring"]
    lin0, ang0, ke0, _ = _mujoco_momentum(cfg, q, v)
    lin1, ang1, ke1, _ = _mujoco_momentum(ring, q1, v1)
    scale = max(1.0, np.abs(np.concatenate([lin0, ang0])).max())
    assert np.abs(lin1 - lin0).max() < 1e-9 * scale
    assert np.abs(ang1 - ang0).max() < 1e-9 * scale
    assert ke1 < ke0 - 1e-3
    mj = ring.mjmodel()
    assert mj.neq == 1 and mj.eq_type[0] == mujoco.mjtEq.mjEQ_WELD
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = q1, v1
    mujoco.mj_forward(mj, d)
    assert np.abs(d.efc_pos[:6]).max() < 1e-12
    s1, s2 = (mj.site(f"ring_{k}").id for k in (1, 2))
    np.testing.assert_allclose(d.site_xmat[s1], d.site_xmat[s2], atol=1e-12)
    twist = []
    for s in (s1, s2):
        x = np.zeros(6)
        mujoco.mj_objectVelocity(mj, d, mujoco.mjtObj.mjOBJ_SITE, s, x, 0)
        twist.append(x)
    assert np.abs(twist[0] - twist[1]).max() < 1e-9 * max(1.0, np.abs(twist[0]).max())
    # opening it: the snake again, same coordinates
    snake = ring.open_loop("ring")
    assert snake.loops == () and snake.to_mjcf() == cfg.to_mjcf()
    # refusals
    with pytest.raises(ValueError, match=r"s3.b and s0.a are 0.0\d+ m .* from mating"):
        close_loop((cfg, model, q, v), *ends, tol=1e-3)
    with pytest.raises(ValueError, match=r"port s3.b is used twice"):
        close_loop((ring, model, q1, v1), *ends)
    with pytest.raises(ValueError, match=r"has loops \['ring'\]: open them first"):
        ring.lock("j1", model, q1, v1)
    with pytest.raises(ValueError, match=r"has no loop 'gap'"):
        ring.open_loop("gap")
    m = uw.module()
    with pytest.raises(ValueError, match=r"loop 0 .*: kind 'joint'; a loop closes as a weld"):
        Configuration({"s0": m, "s1": m}, [("s0", "b", "s1", "a")], "s0",
                      loops=[("s1", "b", "s0", "a")])
    with pytest.raises(ValueError, match=r"port s0.b is used twice: by connection 0 and loop 0"):
        Configuration({"s0": m, "s1": m}, [("s0", "b", "s1", "a")], "s0",
                      loops=[("s1", "b", "s0", "b", "rigid")])
    with pytest.raises(ValueError, match=r"ties module 's1' to itself"):
        Configuration({"s0": m, "s1": m}, [("s0", "b", "s1", "a")], "s0",
                      loops=[("s1", "b", "s1", "left_a", "rigid")])


def test_ring_export_matches_mujoco():
    """A square ring of four modules (its end ports welded with s3.b's hinge at π/2: a weld
    equality, MuJoCo's fluid model, servos) at states around its closure (the weld violated by
    up to ~0.05 rad): diffmb's v̇ and MuJoCo's qacc on the MJCF export agree to 1e-6."""
    snake = uw.snake_configuration(4)
    ring = Configuration(snake.modules, snake.connections, "s0", pos=(0, 0, 2.0),
                         density=uw.RHO, viscosity=uw.VISCOSITY,
                         loops=[Connection("s3", "b", "s0", "a", "rigid", angle=np.pi / 2)])
    rmodel, forces = ring.build(fluid="mujoco")
    q1 = np.array(rmodel.qpos0)
    q1[7:] = np.pi / 2
    mj = ring.mjmodel()
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(5)
    f = jax.jit(lambda q, v, u: _qacc(rmodel, forces, q, v, u))
    err = 0.0
    for _ in range(3):
        qq = q1.copy()
        qq[7:] += 0.03 * rng.normal(size=3)
        vv, u = rng.normal(size=rmodel.nv), np.pi / 2 + 0.3 * rng.normal(size=3)
        d.qpos[:], d.qvel[:], d.ctrl[:] = qq, vv, u
        mujoco.mj_forward(mj, d)
        assert d.nefc >= 6 and np.abs(d.efc_pos[:6]).max() > 1e-3
        a = np.asarray(f(jnp.asarray(qq), jnp.asarray(vv), jnp.asarray(u)))
        err = max(err, rel_err(a, d.qacc))
    assert err < 1e-6


@pytest.mark.slow  # a minute: 2 s of curling and 0.5 s of the ring, RK4 at 1 ms
def test_a_snake_docks_its_ends_into_a_ring_and_the_ring_holds():
    """The study's ring docking: the six-module snake's end ports meet within 2 cm; the lock
    keeps the momentum (bodies and fluid impulse) to 1e-9 and loses kinetic energy; the
    locked ring's weld holds to 0.1 mm while it sinks under its net weight."""
    from diffmb.studies.underwater import RING, ring_docking_run

    r, (ring, ts, q) = ring_docking_run(True)
    assert r["finite"] and r["port_gap_at_lock_m"] <= RING["tol"]
    assert abs(r["closing_hinge_angle_rad"] - np.pi / 3) < 0.1
    assert r["momentum_err"] < 1e-9
    assert r["kinetic_energy_J"]["after"] < r["kinetic_energy_J"]["before"]
    assert r["weld_violation_max"]["position_m"] < 1e-4
    assert r["weld_violation_max"]["orientation"] < 1e-3
    assert r["net_weight_N"] > 0 and r["ring_sink_m"] > 0
    assert len(ring.loops) == 1 and q.shape == (len(ts), 7 + 5)


@pytest.mark.slow  # compiles a 0.5 s simulation of the ring with its weld
def test_ring_simulated_as_mujoco_simulates_it():
    """The square ring (weld equality, MuJoCo's fluid model, servos off their closed shape by
    0.1 rad, joints started off it by up to 0.02 rad, random speeds): diffmb's RK4 and MuJoCo's
    RK4 (``mj_step``) on the MJCF export, 1 ms steps, stay within 1e-9 over 0.5 s of motion."""
    from diffmb.simulation import simulate

    snake = uw.snake_configuration(4)
    ring = Configuration(snake.modules, snake.connections, "s0", pos=(0, 0, 2.0),
                         density=uw.RHO, viscosity=uw.VISCOSITY, timestep=1e-3,
                         loops=[Connection("s3", "b", "s0", "a", "rigid", angle=np.pi / 2)])
    model, forces = ring.build(fluid="mujoco")
    q0 = np.array(model.qpos0)
    q0[7:] = np.pi / 2 + np.array([0.01, -0.02, 0.015])
    v0 = 0.3 * np.random.default_rng(2).normal(size=model.nv)
    u = np.full(3, np.pi / 2 + 0.1)
    ts = np.round(np.arange(1, 6) * 0.1, 10)
    tr = simulate(model, jnp.asarray(q0), jnp.asarray(v0), t1=0.5, dt=1e-3, forces=forces,
                  control=lambda t, q, v, p: jnp.asarray(u), saveat=ts)
    mj = ring.mjmodel()
    mj.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:], d.ctrl[:] = q0, v0, u
    ref = []
    for k in range(500):
        mujoco.mj_step(mj, d)
        if (k + 1) % 100 == 0:
            ref.append(d.qpos.copy())
    ref = np.array(ref)
    assert np.abs(ref[-1] - q0).max() > 0.1  # it moves
    assert np.abs(np.asarray(tr.q) - ref).max() < 1e-9
