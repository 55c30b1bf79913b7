"""MJCF loader through MuJoCo's own compiler.

``mujoco.MjModel.from_xml_path`` resolves includes, default classes, angle units, inertias from
geoms and armature exactly as MuJoCo does; we read the compiled arrays. MuJoCo's qpos/qvel layout
and joint names are kept. Meshes are not needed for dynamics: a file whose meshes are missing is
retried with its meshes (and the geoms using them) removed only if they carry no mass of their
own, otherwise the error is reported.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..model import Model, ModelBuilder
from ..spatial.quaternion import to_rotmat
from ..validation import check_choice
from .sources import with_source

__all__ = ["load_mjcf", "from_mjmodel", "file_timestep", "mjcf_forces", "actuators_from_mjcf", "joint_limits_from_mjcf",
           "joint_friction_from_mjcf", "tendons_from_mjcf", "couplings_from_mjcf",
           "contacts_from_mjcf", "read_contact_pairs",
           "colliding_geom_pairs", "unsupported_features"]

_JT = {0: "free", 1: "ball", 2: "slide", 3: "hinge"}


def load_mjcf(path, *, strict: bool = False, added_mass=None) -> Model:
    """Compile an MJCF file with MuJoCo and build a :class:`Model` with MuJoCo's q/v layout.

    MuJoCo's compiler already refuses most implausible inertias; what it lets through and diffmb
    finds implausible but harmless is loaded with a :class:`diffmb.model.InertiaWarning`, or
    refused with ``strict=True`` (rules: :class:`diffmb.model.ModelBuilder`).
    ``added_mass="potential"``: each body's potential-flow added inertia from its geoms and
    ``<option density>`` (:func:`diffmb.io.mjcf_fluid.potential_added_inertia_from_mjmodel`)
    in ``Model.body_added_inertia``; pair it with ``mjcf_forces(path, fluid="potential")``.
    """
    import mujoco

    src = str(path)
    if not Path(src).exists():
        raise FileNotFoundError(f"{src}: no such MJCF file")
    _reject_entities(src)
    try:
        mj = mujoco.MjModel.from_xml_path(src)
    except ValueError as e:
        raise ValueError(f"{src}: MuJoCo could not compile the model: {e}") from None
    model = from_mjmodel(mj, source=src, name=Path(src).stem, strict=strict, added_mass=added_mass)
    return with_source(model, src, "mjcf")  # Model.source: path and SHA-256


def _reject_entities(src):
    from defusedxml import ElementTree as ET
    from defusedxml.common import DefusedXmlException

    try:
        ET.parse(src)
    except DefusedXmlException as e:
        raise ValueError(f"{src}: unsafe XML rejected ({type(e).__name__})") from None
    except ET.ParseError as e:
        raise ValueError(f"{src}: malformed XML: {e}") from None


_PREFIX = {"BODY": "body", "JOINT": "joint", "GEOM": "geom"}


def object_name(mj, kind: str, i: int) -> str:
    """The name of MuJoCo object ``i`` of ``kind`` ("BODY", "JOINT" or "GEOM"): its own, or
    ``body7``-style for an unnamed one, with ``_`` appended while that collides with a name
    given in the file (a file may name a joint "joint1" and leave joint 1 unnamed)."""
    import mujoco

    obj = getattr(mujoco.mjtObj, f"mjOBJ_{kind}")
    own = mujoco.mj_id2name(mj, obj, int(i))
    if own:
        return own
    count = {"BODY": mj.nbody, "JOINT": mj.njnt, "GEOM": mj.ngeom}[kind]
    given = {mujoco.mj_id2name(mj, obj, k) for k in range(count)}
    out = f"{_PREFIX[kind]}{int(i)}"
    while out in given:
        out += "_"
    return out


def _quat_R(q):
    return np.asarray(to_rotmat(np.asarray(q, dtype=float)))


def from_mjmodel(mj, source="<MjModel>", name="mjcf", *, strict: bool = False,
                 added_mass=None) -> Model:
    """:func:`load_mjcf` on a compiled ``mujoco.MjModel``."""

    if added_mass not in (None, "potential"):
        raise ValueError(f"{source}: added_mass={added_mass!r}; accepted: None, 'potential'")
    b = ModelBuilder(name=name, source=source, strict=strict)
    # <flag gravity="disable"/>: MuJoCo applies no gravity (nor gravity compensation)
    b.gravity = np.zeros(3) if _disabled(mj, "GRAVITY") else np.array(mj.opt.gravity, float)
    names = []
    for i in range(1, mj.nbody):
        nm = object_name(mj, "BODY", i)
        names.append(nm)
    for i in range(1, mj.nbody):
        joints = []
        for j in range(mj.jnt_dofadr.shape[0]):
            if mj.jnt_bodyid[j] != i:
                continue
            jt = _JT[int(mj.jnt_type[j])]
            d0 = mj.jnt_dofadr[j]
            jname = object_name(mj, "JOINT", j)
            qa = mj.jnt_qposadr[j]
            jd = dict(
                name=jname,
                type=jt,
                pos=np.array(mj.jnt_pos[j]),
                axis=np.array(mj.jnt_axis[j]),
                armature=float(mj.dof_armature[d0]),
                damping=float(mj.dof_damping[d0]),
                stiffness=float(mj.jnt_stiffness[j]),
            )
            if jt in ("hinge", "slide"):
                jd["qpos0"] = float(mj.qpos0[qa])
                jd["qpos_spring"] = [float(mj.qpos_spring[qa])]
            elif jt == "ball":
                jd["qpos_spring"] = np.array(mj.qpos_spring[qa : qa + 4])
            else:
                jd["qpos_spring"] = np.array(mj.qpos_spring[qa : qa + 7])
            joints.append(jd)
        Ri = _quat_R(mj.body_iquat[i])
        I = Ri @ np.diag(mj.body_inertia[i]) @ Ri.T
        par = int(mj.body_parentid[i]) - 1
        b.add_body(
            names[i - 1],
            par,
            rot=_quat_R(mj.body_quat[i]),
            pos=np.array(mj.body_pos[i]),
            mass=float(mj.body_mass[i]),
            com=np.array(mj.body_ipos[i]),
            inertia=0.5 * (I + I.T),
            joints=joints,
        )
    model = b.build()
    if model.nq != mj.nq or model.nv != mj.nv:
        raise ValueError(f"{source}: layout mismatch with MuJoCo (nq {model.nq} vs {mj.nq})")
    # MuJoCo orders joints by body and dof address: assert ours is identical.
    for j in range(mj.njnt):
        if model.joint_v[j] != mj.jnt_dofadr[j] or model.joint_q[j] != mj.jnt_qposadr[j]:
            raise ValueError(f"{source}: joint {j} layout differs from MuJoCo's")
    if added_mass == "potential":
        from ..model import with_added_inertia
        from .mjcf_fluid import potential_added_inertia_from_mjmodel

        model = with_added_inertia(
            model, potential_added_inertia_from_mjmodel(mj, where=source), source=source)
    return model


# ------------------------------------------------------------------------------------------
# Force elements (actuators, joint limits): plain numpy read from the compiled MjModel.
# ------------------------------------------------------------------------------------------


class _Named:
    """A compiled MjModel with the path of the file it came from, so that every refusal of the
    readers below names the file."""

    def __init__(self, mj, where):
        self.mj, self.where = mj, where


def _as_mjmodel(src):
    import mujoco

    if isinstance(src, _Named):
        return src.mj, src.where
    if isinstance(src, mujoco.MjModel):
        return src, "<MjModel>"
    path = str(src)
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no such MJCF file")
    _reject_entities(path)
    try:
        return mujoco.MjModel.from_xml_path(path), path
    except ValueError as e:
        raise ValueError(f"{path}: MuJoCo could not compile the model: {e}") from None


def file_timestep(path) -> float:
    """The file's ``<option timestep>`` in seconds (MuJoCo's default 0.002 when absent).

    Raises ``ValueError`` naming the file when MuJoCo cannot compile it."""
    mj, _ = _as_mjmodel(path)
    return float(mj.opt.timestep)


def _disabled(mj, flag: str) -> bool:
    """``<option><flag name="disable"/>``: the mjtDisableBit ``mjDSBL_<flag>`` is set."""
    import mujoco

    return bool(int(mj.opt.disableflags) & int(getattr(mujoco.mjtDisableBit, "mjDSBL_" + flag)))


def _enabled(mj, flag: str) -> bool:
    """``<option><flag name="enable"/>``: the mjtEnableBit ``mjENBL_<flag>`` is set."""
    import mujoco

    bit = getattr(mujoco.mjtEnableBit, "mjENBL_" + flag, None)
    return bit is not None and bool(int(mj.opt.enableflags) & int(bit))


def _constraints_off(mj, kind: str) -> bool:
    """MuJoCo instantiates no constraint of ``kind`` (LIMIT, FRICTIONLOSS, EQUALITY, CONTACT):
    its own flag or ``constraint`` is disabled."""
    return _disabled(mj, "CONSTRAINT") or _disabled(mj, kind)


def _solref(mj, solref):
    """``solref`` as MuJoCo uses it: with ``refsafe`` (default) a positive time constant is at
    least twice the time step."""
    from ..forces.elements import refsafe

    r = np.array(solref, float)
    return r if _disabled(mj, "REFSAFE") else refsafe(r, float(mj.opt.timestep), xp=np)


def _solimp(solimp):
    """``solimp`` as MuJoCo uses it: d_min, d_max and mid clamped to [1e-4, 0.9999], the width
    to ≥ 0 and the power to ≥ 1."""
    si = np.array(solimp, float)
    si[[0, 1, 3]] = np.clip(si[[0, 1, 3]], 1e-4, 0.9999)
    si[2], si[4] = max(si[2], 0.0), max(si[4], 1.0)
    return si


_DYN = {0: "none", 1: "integrator", 2: "filter", 3: "filterexact"}  # mjtDyn values


def read_actuators(src) -> dict:
    """MJCF actuators of a file (or compiled ``MjModel``) as numpy arrays, one row per actuator.

    Supported: joint transmission on hinge/slide joints or a fixed tendon, activation dynamics
    none, integrator, filter or filterexact, fixed gain, affine or no bias -- i.e. ``<motor>``,
    ``<position>`` (with or without ``timeconst``), ``<velocity>``, ``<intvelocity>`` and
    ``<general>`` written in that form. Anything else is an error naming the actuator. Keys:
    names, dof (velocity index, -1 for a tendon), tendon (tendon id or -1), gear, gain
    (gainprm[0]), bias (biasprm[0:3]), ctrlrange (nu, 2), ctrllimited, forcerange,
    forcelimited, dynamics ("none", "integrator", "filter", "filterexact"), timeconst
    (dynprm[0]), actlimited, actrange (nu, 2).
    """
    import mujoco

    mj, where = _as_mjmodel(src)
    names, dof, gear, gain, bias, tendon = [], [], [], [], [], []
    fixed = _fixed_tendon_ids(mj)
    for a in range(mj.nu):
        nm = mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_ACTUATOR, a) or f"actuator{a}"
        bad = None
        trn = int(mj.actuator_trntype[a])
        if trn == int(mujoco.mjtTrn.mjTRN_TENDON):
            if int(mj.actuator_trnid[a, 0]) not in fixed:
                bad = "transmission through a spatial tendon is unsupported"
        elif trn != int(mujoco.mjtTrn.mjTRN_JOINT):
            bad = "only joint and fixed-tendon transmissions are supported"
        elif int(mj.actuator_dyntype[a]) not in _DYN:
            bad = (f"activation dynamics {mujoco.mjtDyn(int(mj.actuator_dyntype[a])).name} "
                   "unsupported (none, integrator, filter and filterexact are)")
        elif int(mj.actuator_gaintype[a]) != int(mujoco.mjtGain.mjGAIN_FIXED):
            bad = "only fixed gains are supported"
        elif int(mj.actuator_biastype[a]) not in (
            int(mujoco.mjtBias.mjBIAS_NONE),
            int(mujoco.mjtBias.mjBIAS_AFFINE),
        ):
            bad = "only none/affine bias is supported"
        elif trn == int(mujoco.mjtTrn.mjTRN_JOINT):
            j = int(mj.actuator_trnid[a, 0])
            if _JT[int(mj.jnt_type[j])] not in ("hinge", "slide"):
                bad = "joint transmission on a ball/free joint is unsupported"
        for extra in ("actuator_damping", "actuator_armature", "actuator_dampingpoly"):
            if bad is None and hasattr(mj, extra) and np.any(np.asarray(getattr(mj, extra))[a]):
                bad = f"{extra.split('_')[1]} on actuators is unsupported"
        if bad:
            raise ValueError(f"{where}: actuator {nm!r}: {bad}")
        names.append(nm)
        is_tendon = trn == int(mujoco.mjtTrn.mjTRN_TENDON)
        tendon.append(int(mj.actuator_trnid[a, 0]) if is_tendon else -1)
        dof.append(-1 if is_tendon else int(mj.jnt_dofadr[int(mj.actuator_trnid[a, 0])]))
        gear.append(float(mj.actuator_gear[a, 0]))
        gain.append(float(mj.actuator_gainprm[a, 0]))
        biastype_none = int(mj.actuator_biastype[a]) == int(mujoco.mjtBias.mjBIAS_NONE)
        bias.append(np.zeros(3) if biastype_none else np.array(mj.actuator_biasprm[a, :3], float))
    return dict(
        names=tuple(names),
        dof=tuple(dof),
        tendon=tuple(tendon),
        gear=np.array(gear, float),
        gain=np.array(gain, float),
        bias=np.array(bias, float).reshape(-1, 3),
        ctrlrange=np.array(mj.actuator_ctrlrange, float).reshape(-1, 2),
        ctrllimited=np.array(mj.actuator_ctrllimited, bool).reshape(-1),
        forcerange=np.array(mj.actuator_forcerange, float).reshape(-1, 2),
        forcelimited=np.array(mj.actuator_forcelimited, bool).reshape(-1),
        dynamics=tuple(_DYN[int(d)] for d in np.asarray(mj.actuator_dyntype).reshape(-1)),
        timeconst=np.array(mj.actuator_dynprm, float).reshape(mj.nu, -1)[:, 0],
        actlimited=np.array(mj.actuator_actlimited, bool).reshape(-1),
        actrange=np.array(mj.actuator_actrange, float).reshape(-1, 2),
    )


def read_joint_limits(src) -> dict:
    """Limited hinge/slide joints of an MJCF file: names, joint ids, dof, qpos index and range
    (radians/m)."""

    mj, _ = _as_mjmodel(src)
    names, ids, dof, qadr, rng = [], [], [], [], []
    for j in range(mj.njnt):
        if not bool(mj.jnt_limited[j]) or _JT[int(mj.jnt_type[j])] not in ("hinge", "slide"):
            continue
        names.append(object_name(mj, "JOINT", j))
        ids.append(j)
        dof.append(int(mj.jnt_dofadr[j]))
        qadr.append(int(mj.jnt_qposadr[j]))
        rng.append(np.array(mj.jnt_range[j], float))
    return dict(
        names=tuple(names), joint=tuple(ids), dof=tuple(dof), qadr=tuple(qadr),
        range=np.array(rng).reshape(-1, 2)
    )


def actuators_from_mjcf(src, model: Model | None = None):
    """The :class:`~diffmb.forces.Actuators` element of an MJCF file or a compiled ``MjModel``;
    an :class:`~diffmb.forces.ActivatedActuators` around it where an actuator has activation
    dynamics (its state: the activations, from 0)."""
    from ..forces.elements import ActivatedActuators, Actuators

    mj, where = _as_mjmodel(src)
    a = read_actuators(_Named(mj, where))
    qadr = [-1 if d < 0 else int(mj.jnt_qposadr[list(mj.jnt_dofadr).index(d)]) for d in a["dof"]]
    if model is not None and model.nv != mj.nv:
        raise ValueError(f"{where}: actuators are for nv={mj.nv}, model {model.name} has {model.nv}")
    kw = {}
    if any(t >= 0 for t in a["tendon"]):  # a transmission matrix: unit rows and tendon rows
        coef = np.zeros((len(a["dof"]), mj.nv))
        for i, (d, t) in enumerate(zip(a["dof"], a["tendon"], strict=True)):
            if t >= 0:
                coef[i] = _tendon_coef(mj, t)
            else:
                coef[i, d] = 1.0
        kw = dict(coef=coef, dof_qadr=_dof_qadr(mj))
    # <flag actuation="disable"/> and <option actuatorgroupdisable>: no force from those
    groups = np.asarray(mj.actuator_group, int).reshape(-1)
    off = int(getattr(mj.opt, "disableactuator", 0))
    enabled = [not _disabled(mj, "ACTUATION") and not (0 <= g < 31 and (off >> g) & 1)
               for g in groups]
    # <flag clampctrl="disable"/>: controls are not clipped to ctrlrange
    ctrllimited = [False] * mj.nu if _disabled(mj, "CLAMPCTRL") else list(a["ctrllimited"])
    # joint actuatorfrcrange: the sum of actuator forces on a hinge/slide dof is clamped
    jlim = np.zeros(mj.nv, bool)
    jrange = np.zeros((mj.nv, 2))
    for j in range(mj.njnt):
        if bool(mj.jnt_actfrclimited[j]) and _JT[int(mj.jnt_type[j])] in ("hinge", "slide"):
            jlim[int(mj.jnt_dofadr[j])] = True
            jrange[int(mj.jnt_dofadr[j])] = mj.jnt_actfrcrange[j]
    if jlim.any():
        kw.update(joint_forcerange=jrange, joint_forcelimited=list(jlim))
    act = Actuators(a["dof"], qadr, a["gear"], a["gain"], a["bias"], a["ctrlrange"],
                    ctrllimited, a["forcerange"], list(a["forcelimited"]), a["names"],
                    enabled=enabled, **kw)
    if all(d == "none" for d in a["dynamics"]):
        return act
    return ActivatedActuators(act, a["dynamics"], a["timeconst"], list(a["actlimited"]),
                              a["actrange"])


def joint_limits_from_mjcf(src, stiffness=None, damping=None):
    """:class:`~diffmb.forces.JointLimits` on the limited hinge/slide joints of a file.

    With ``stiffness``/``damping`` given (scalars or one per limited joint) they are a penalty
    spring-damper, used as they are. Otherwise each limit is MuJoCo's soft constraint with the
    joint's ``solref``/``solimp`` and inverse mass ``dof_invweight0`` (its force from the
    joint's acceleration without the limit; see :class:`~diffmb.forces.JointLimits`), with
    the penalty gains of :func:`~diffmb.forces.elements.soft_constraint_gains` kept on it.
    A joint's ``margin`` moves both bounds inward by it, where MuJoCo's limit starts to act.
    """
    from ..forces.elements import JointLimits

    mj, _ = _as_mjmodel(src)
    lim = read_joint_limits(mj)
    r = lim["range"]
    soft = {}
    if stiffness is None and damping is None:  # MuJoCo's constraint (penalty gains kept)
        js = list(lim["joint"])
        soft = dict(solref=np.array([_solref(mj, mj.jnt_solref[j]) for j in js]).reshape(-1, 2),
                    solimp=np.asarray(mj.jnt_solimp, float)[js].reshape(-1, 5),
                    invweight=np.asarray(mj.dof_invweight0, float)[list(lim["dof"])])
    if stiffness is None or damping is None:
        ks, bs = [], []
        for j in lim["joint"]:
            k, b = _soft_gain(mj, mj.jnt_solref[j], mj.jnt_solimp[j], int(mj.jnt_dofadr[j]))
            ks.append(k)
            bs.append(b)
        stiffness = np.array(ks) if stiffness is None else stiffness
        damping = np.array(bs) if damping is None else damping
    # a limit acts from ``margin`` inside the range (MuJoCo's violation is distance − margin)
    m = np.asarray(mj.jnt_margin, float)[list(lim["joint"])]
    return JointLimits(lim["dof"], lim["qadr"], r[:, 0] + m, r[:, 1] - m, stiffness, damping,
                       **soft)


def _soft_gain(mj, solref, solimp, dof):
    """Penalty gains (k, b) of a soft constraint on ``dof`` (:func:`soft_constraint_gains`
    with m = 1/``dof_invweight0``)."""
    from ..forces.elements import soft_constraint_gains

    return soft_constraint_gains(1.0 / float(mj.dof_invweight0[dof]), _solref(mj, solref), solimp)


def joint_friction_from_mjcf(src, *, _hinge_slide_only=False):
    """:class:`~diffmb.forces.JointFriction` of the file's ``frictionloss`` (per dof).

    The slope :func:`~diffmb.forces.elements.friction_slope` (m = 1/``dof_invweight0``, the
    dof's ``solreffriction``/``solimpfriction``) gives MuJoCo's creep below the friction level;
    above it the force saturates at the friction loss.
    """
    from ..forces.elements import JointFriction, friction_slope

    mj, _ = _as_mjmodel(src)
    f = np.asarray(mj.dof_frictionloss, float).copy()
    if _hinge_slide_only:
        for j in range(mj.njnt):
            if _JT[int(mj.jnt_type[j])] in ("ball", "free"):
                f[_joint_dofs(mj, j)] = 0.0
    c = np.zeros(mj.nv)
    for i in np.flatnonzero(f > 0):
        c[i] = friction_slope(1.0 / float(mj.dof_invweight0[i]), _solref(mj, mj.dof_solref[i]),
                              mj.dof_solimp[i])
    return JointFriction(f, c)


def _dof_qadr(mj) -> tuple:
    """For each dof, the qpos index of its hinge/slide joint, or -1."""
    out = [-1] * mj.nv
    for j in range(mj.njnt):
        if _JT[int(mj.jnt_type[j])] in ("hinge", "slide"):
            out[int(mj.jnt_dofadr[j])] = int(mj.jnt_qposadr[j])
    return tuple(out)


def _fixed_tendon_ids(mj) -> set:
    """Tendons whose every wrap is a joint (``<fixed>``) on hinge/slide joints."""
    import mujoco

    out = set()
    for t in range(mj.ntendon):
        a, n = int(mj.tendon_adr[t]), int(mj.tendon_num[t])
        wraps = range(a, a + n)
        if all(int(mj.wrap_type[w]) == int(mujoco.mjtWrap.mjWRAP_JOINT)
               and _JT[int(mj.jnt_type[int(mj.wrap_objid[w])])] in ("hinge", "slide")
               for w in wraps):
            out.add(t)
    return out


def _tendon_coef(mj, t) -> np.ndarray:
    """The fixed tendon's length coefficients over dofs (nv,)."""
    c = np.zeros(mj.nv)
    a, n = int(mj.tendon_adr[t]), int(mj.tendon_num[t])
    for w in range(a, a + n):
        c[int(mj.jnt_dofadr[int(mj.wrap_objid[w])])] += float(mj.wrap_prm[w])
    return c


def tendons_from_mjcf(src, *, limits=True, friction=True):
    """:class:`~diffmb.forces.FixedTendons` of the file's fixed tendons (None if it has none).

    Springs with their deadband (``springlength``, resolved by MuJoCo's compiler), damping,
    ``frictionloss`` (slope from ``solreffriction``/``solimpfriction`` as for joints) and limits
    (``range``: MuJoCo's soft constraint from ``solreflimit``/``solimplimit`` and the tendon's
    inverse mass ``tendon_invweight0``, penalty gains from
    :func:`~diffmb.forces.elements.soft_constraint_gains` kept on it).
    Spatial tendons: :func:`spatial_tendons_from_mjcf`.
    ``limits``/``friction`` False leave those parts out; the file's ``<flag>`` switches
    (limit, frictionloss, constraint, spring, damper) are honoured as MuJoCo honours them.
    """

    from ..forces.elements import FixedTendons

    mj, _ = _as_mjmodel(src)
    ids = sorted(_fixed_tendon_ids(mj))
    if not ids:
        return None

    coef = np.stack([_tendon_coef(mj, t) for t in ids])
    return FixedTendons(coef, _dof_qadr(mj), **_tendon_params(mj, ids, limits, friction))


def _tendon_params(mj, ids, limits, friction) -> dict:
    """The keywords of :class:`~diffmb.forces.FixedTendons` for MuJoCo's tendons ``ids``."""
    import mujoco

    from ..forces.elements import friction_slope, soft_constraint_gains

    no_limits = not limits or _constraints_off(mj, "LIMIT")
    no_friction = not friction or _constraints_off(mj, "FRICTIONLOSS")
    kl, bl, cf = [], [], []
    for t in ids:
        w = float(mj.tendon_invweight0[t])
        limited = bool(mj.tendon_limited[t]) and not no_limits
        rubs = float(mj.tendon_frictionloss[t]) > 0 and not no_friction
        if not w > 0:  # no joint changes its length at qpos0 (a straight path, say)
            if limited or rubs:
                raise ValueError(
                    f"{object_name(mj, 'TENDON', t)!r}: no joint changes the tendon's length at "
                    "qpos0 (tendon_invweight0 = 0), where MuJoCo makes its limit and friction "
                    "rigid; diffmb's soft laws need a finite effective mass: start the model "
                    "where the tendon can move, or leave out its range and frictionloss")
            kl.append(0.0)
            bl.append(0.0)
            cf.append(0.0)
            continue
        m_eff = 1.0 / w
        k, b = soft_constraint_gains(m_eff, _solref(mj, mj.tendon_solref_lim[t]),
                                     mj.tendon_solimp_lim[t])
        kl.append(k)
        bl.append(b)
        cf.append(friction_slope(m_eff, _solref(mj, mj.tendon_solref_fri[t]),
                                 mj.tendon_solimp_fri[t]))
    return dict(
        stiffness=np.asarray(mj.tendon_stiffness)[ids] * (not _disabled(mj, "SPRING")),
        springlength=np.asarray(mj.tendon_lengthspring)[ids],
        damping=np.asarray(mj.tendon_damping)[ids] * (not _disabled(mj, "DAMPER")),
        frictionloss=0.0 if no_friction else np.asarray(mj.tendon_frictionloss)[ids],
        friction_slope=np.array(cf),
        limited=[bool(mj.tendon_limited[t]) and not no_limits for t in ids],
        range=np.asarray(mj.tendon_range)[ids] + np.outer(np.asarray(mj.tendon_margin)[ids],
                                                            [1.0, -1.0]),
        limit_stiffness=np.array(kl), limit_damping=np.array(bl),
        limit_solref=np.array([_solref(mj, mj.tendon_solref_lim[t]) for t in ids]),
        limit_solimp=np.asarray(mj.tendon_solimp_lim, float)[ids],
        limit_invweight=np.asarray(mj.tendon_invweight0, float)[ids],
        names=[mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_TENDON, t) or f"tendon{t}" for t in ids],
    )


def _site_tendon_ids(mj) -> list:
    """Spatial tendons whose every wrap is a site (no wrapping geom, no pulley)."""
    import mujoco

    out = []
    for t in range(mj.ntendon):
        a, n = int(mj.tendon_adr[t]), int(mj.tendon_num[t])
        if n >= 2 and all(int(mj.wrap_type[w]) == int(mujoco.mjtWrap.mjWRAP_SITE)
                          for w in range(a, a + n)):
            out.append(t)
    return out


def spatial_tendons_from_mjcf(src, *, limits=True, friction=True):
    """:class:`~diffmb.forces.SpatialTendons` of the file's spatial tendons through sites (None
    if it has none), with the same springs, damping, friction loss and limits as
    :func:`tendons_from_mjcf`. Tendons that wrap around geoms or pass pulleys are left to
    :func:`unsupported_features`."""
    from ..forces.elements import SpatialTendons

    mj, _ = _as_mjmodel(src)
    ids = _site_tendon_ids(mj)
    if not ids:
        return None
    paths = []
    for t in ids:
        a, n = int(mj.tendon_adr[t]), int(mj.tendon_num[t])
        sites = [int(mj.wrap_objid[w]) for w in range(a, a + n)]
        paths.append([("world" if int(mj.site_bodyid[s]) == 0
                       else _body_name(mj, int(mj.site_bodyid[s])),
                       np.asarray(mj.site_pos[s], float)) for s in sites])
    return SpatialTendons(paths, _dof_qadr(mj), **_tendon_params(mj, ids, limits, friction))


def _coupling_ids(mj) -> list:
    """Active joint equalities on hinge/slide joints and tendon equalities on fixed tendons."""
    import mujoco

    fixed = _fixed_tendon_ids(mj)
    out = []
    for e in range(mj.neq):
        if not bool(mj.eq_active0[e]):
            continue
        ty, o1, o2 = int(mj.eq_type[e]), int(mj.eq_obj1id[e]), int(mj.eq_obj2id[e])
        if ty == int(mujoco.mjtEq.mjEQ_JOINT):
            hs = lambda j: _JT[int(mj.jnt_type[j])] in ("hinge", "slide")  # noqa: E731
            if hs(o1) and (o2 < 0 or hs(o2)):
                out.append(e)
        elif ty == int(mujoco.mjtEq.mjEQ_TENDON) and o1 in fixed and (o2 < 0 or o2 in fixed):
            out.append(e)
    return out


def couplings_from_mjcf(src):
    """:class:`~diffmb.forces.Couplings` of the file's active joint and fixed-tendon
    equalities (None if none, or if ``equality``/``constraint`` is disabled in the file's
    ``<flag>``). Gains from each equality's ``solref``/``solimp`` with the
    effective mass 1/(w₁ + w₂), w the coordinates' ``dof_invweight0``/``tendon_invweight0``
    (MuJoCo's diagonal approximation for these constraints)."""
    import mujoco

    from ..forces.elements import Couplings, soft_constraint_gains

    mj, _ = _as_mjmodel(src)
    ids = [] if _constraints_off(mj, "EQUALITY") else _coupling_ids(mj)
    if not ids:
        return None
    n = len(ids)
    c1, c2 = np.zeros((n, mj.nv)), np.zeros((n, mj.nv))
    r1, r2, ks, bs, names = np.zeros(n), np.zeros(n), [], [], []
    qpos0 = np.asarray(mj.qpos0)
    for i, e in enumerate(ids):
        o1, o2 = int(mj.eq_obj1id[e]), int(mj.eq_obj2id[e])
        w = 0.0
        for row, ref, o in ((c1, r1, o1), (c2, r2, o2)):
            if o < 0:
                continue
            if int(mj.eq_type[e]) == int(mujoco.mjtEq.mjEQ_JOINT):
                row[i, int(mj.jnt_dofadr[o])] = 1.0
                ref[i] = qpos0[int(mj.jnt_qposadr[o])]
                w += float(mj.dof_invweight0[int(mj.jnt_dofadr[o])])
            else:
                row[i] = _tendon_coef(mj, o)
                ref[i] = float(mj.tendon_length0[o])
                w += float(mj.tendon_invweight0[o])
        k, b = soft_constraint_gains(1.0 / w, _solref(mj, mj.eq_solref[e]), mj.eq_solimp[e])
        ks.append(k)
        bs.append(b)
        names.append(mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_EQUALITY, e) or f"equality{e}")
    return Couplings(c1, c2, r1, r2, np.asarray(mj.eq_data)[ids, :5], np.array(ks),
                     np.array(bs), _dof_qadr(mj), names)


def unsupported_features(src) -> list[str]:
    """What MuJoCo would simulate in this file that diffmb's force elements do not (yet), each
    as ``"<name> (<detail>)"``; ``<name>`` is what ``mjcf_forces(ignore=...)`` accepts."""
    mj, _ = _as_mjmodel(src)
    out = []
    fixed = _fixed_tendon_ids(mj)
    wrapped = mj.ntendon - len(fixed) - len(_site_tendon_ids(mj))
    if wrapped:
        out.append(f"spatial_tendons ({wrapped} wrapping geoms or passing pulleys)")
    from .mjcf_equality import unsupported_equalities

    bad_eq = unsupported_equalities(mj)  # [] when the equality or constraint flag is off
    if bad_eq:
        out.append(f"equalities ({len(bad_eq)}: {', '.join(bad_eq)}; flex, flexvert, "
                   "flexstrain and distance equalities and equalities of spatial tendons are "
                   "not modelled)")
    if any(np.any(np.asarray(getattr(mj, a))) for a in ("tendon_armature", "tendon_stiffnesspoly",
                                                        "tendon_dampingpoly")
           if hasattr(mj, a)):
        out.append("tendon_armature_or_polynomials")
    if any(np.any(np.asarray(getattr(mj, a))) for a in ("jnt_stiffnesspoly", "dof_dampingpoly")
           if hasattr(mj, a)):
        out.append("joint_polynomial_springs")
    if getattr(mj, "nplastic", 0):
        out.append(f"plasticity ({mj.nplastic})")
    if getattr(mj, "nflex", 0):
        out.append(f"flex ({mj.nflex})")
    if getattr(mj, "nplugin", 0):
        out.append(f"plugins ({mj.nplugin})")
    limited_3d = [j for j in range(mj.njnt)
                  if mj.jnt_limited[j] and _JT[int(mj.jnt_type[j])] in ("ball", "free")]
    if limited_3d and not _constraints_off(mj, "LIMIT"):
        out.append(f"ball_limits ({len(limited_3d)})")
    fric_3d = [_joint_name(mj, j) for j in range(mj.njnt)
               if _JT[int(mj.jnt_type[j])] in ("ball", "free")
               and np.any(np.asarray(mj.dof_frictionloss)[_joint_dofs(mj, j)] > 0)]
    if fric_3d and not _constraints_off(mj, "FRICTIONLOSS"):
        out.append(f"ball_frictionloss (joints {fric_3d}: MuJoCo's friction-loss rows of a "
                   "ball or free joint are coupled through the joint's inertia; diffmb's "
                   "per-dof friction law matches them only where every row saturates)")
    tfr = [t for t in range(mj.ntendon) if bool(mj.tendon_actfrclimited[t])]
    if tfr and mj.nu and not _disabled(mj, "ACTUATION"):
        out.append(f"tendon_actuatorfrcrange ({len(tfr)} tendons)")
    if _enabled(mj, "OVERRIDE") and _colliding_geom_ids(mj):
        out.append("override (contact parameters replaced by <option o_margin o_solref "
                   "o_solimp o_friction>)")
    if _enabled(mj, "SLEEP"):
        out.append("sleep (MuJoCo freezes bodies that come to rest)")
    for flag, what in (("IPC", "incremental-potential contacts"),
                       ("SPECULATIVE", "speculative contacts")):
        if _enabled(mj, flag) and _colliding_geom_ids(mj):
            out.append(f"{flag.lower()} ({what})")
    if _enabled(mj, "DIAGEXACT") and _has_constraints(mj):
        out.append("diagexact (constraint regularisation from the exact diagonal of the "
                   "constraint inertia, not dof_invweight0)")
    return out


def _joint_name(mj, j):

    return object_name(mj, "JOINT", j)


def _joint_dofs(mj, j) -> list:
    n = {"free": 6, "ball": 3}.get(_JT[int(mj.jnt_type[j])], 1)
    return list(range(int(mj.jnt_dofadr[j]), int(mj.jnt_dofadr[j]) + n))


def _has_constraints(mj) -> bool:
    """The file has a limit, friction loss, equality or contact that MuJoCo would instantiate."""
    if _disabled(mj, "CONSTRAINT"):
        return False
    lim = not _disabled(mj, "LIMIT") and (np.any(mj.jnt_limited) or np.any(mj.tendon_limited))
    fri = not _disabled(mj, "FRICTIONLOSS") and (np.any(np.asarray(mj.dof_frictionloss) > 0)
                                                 or np.any(np.asarray(mj.tendon_frictionloss) > 0))
    eq = not _disabled(mj, "EQUALITY") and np.any(mj.eq_active0)
    return bool(lim or fri or eq or _colliding_geom_ids(mj))


def _colliding_geom_ids(mj) -> list[tuple[int, int, int]]:
    """(g1, g2, pair id or -1) of the geom pairs MuJoCo's collision filter would test, in
    MuJoCo's order of preference: every explicit ``<pair>``, then the dynamic pairs of geoms on
    bodies in different weld groups (``body_weldid``) whose contype/conaffinity bitmasks
    match, less a body and its parent's weld group (unless ``filterparent`` is disabled; the
    world's children are not filtered), body pairs named in ``<exclude>`` (by body, not weld
    group) and the geom pairs an explicit ``<pair>`` already covers; pairs for which MuJoCo has
    no collision function (plane or height field against plane or height field) are left out.
    Empty when contacts are disabled."""
    import mujoco

    if _constraints_off(mj, "CONTACT"):
        return []
    excluded = {(int(s) >> 16, int(s) & 0xFFFF) for s in np.asarray(mj.exclude_signature)}
    filterparent = not (mj.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_FILTERPARENT))
    weld = lambda b: int(mj.body_weldid[b])  # noqa: E731
    flat = lambda g: _GEOM_TYPES.get(int(mj.geom_type[g])) in _TERRAIN_GEOMS  # noqa: E731
    out = [(int(mj.pair_geom1[i]), int(mj.pair_geom2[i]), i) for i in range(mj.npair)
           if not (flat(int(mj.pair_geom1[i])) and flat(int(mj.pair_geom2[i])))]
    explicit = {frozenset((int(mj.pair_geom1[i]), int(mj.pair_geom2[i])))
                for i in range(mj.npair)}
    for g1 in range(mj.ngeom):
        for g2 in range(g1 + 1, mj.ngeom):
            a1, a2 = int(mj.geom_bodyid[g1]), int(mj.geom_bodyid[g2])
            b1, b2 = weld(a1), weld(a2)
            if b1 == b2 or (flat(g1) and flat(g2)):
                continue
            if not ((mj.geom_contype[g1] & mj.geom_conaffinity[g2])
                    or (mj.geom_contype[g2] & mj.geom_conaffinity[g1])):
                continue
            if (min(a1, a2), max(a1, a2)) in excluded:
                continue
            p1, p2 = weld(int(mj.body_parentid[b1])), weld(int(mj.body_parentid[b2]))
            if filterparent and (p1 == b2 or p2 == b1) and b1 != 0 and b2 != 0:
                continue
            if frozenset((g1, g2)) in explicit:
                continue
            out.append((g1, g2, -1))
    return out


def _geom_name(mj, g):

    return object_name(mj, "GEOM", g)


def colliding_geom_pairs(src) -> list[tuple[str, str]]:
    """Geom pairs that MuJoCo's collision filter would test (contype/conaffinity, parent-child
    filtering, ``<exclude>``, explicit ``<pair>``), by name; empty when contacts are disabled."""
    mj, _ = _as_mjmodel(src)
    return [(_geom_name(mj, g1), _geom_name(mj, g2)) for g1, g2, _ in _colliding_geom_ids(mj)]


_TERRAIN_GEOMS = ("plane", "hfield")
_BODY_GEOMS = ("sphere", "capsule", "box", "cylinder", "ellipsoid", "mesh")
_GEOM_TYPES = {0: "plane", 1: "hfield", 2: "sphere", 3: "capsule", 4: "ellipsoid", 5: "cylinder",
               6: "box", 7: "mesh", 8: "sdf"}


def _mixed_contact_params(mj, g1, g2, pair):
    """MuJoCo's parameters of one contact pair (``mj_contactParam``): from an explicit
    ``<pair>`` as given; otherwise friction is the elementwise max, solref/solimp the
    solmix-weighted mean (solref: the
    elementwise min when either is direct, negative) and condim the max, unless one geom has the higher ``priority``,
    whose friction, solref, solimp and condim are then used. ``margin`` is where the contact
    starts to act (MuJoCo's ``includemargin``): the pair's ``margin``, else the sum of the two
    geoms' (``gap`` only adds contacts that exert no force beyond it)."""
    if pair >= 0:
        fr = np.array(mj.pair_solreffriction[pair], float)
        return dict(friction=np.array(mj.pair_friction[pair][:3], float),
                    solref=np.array(mj.pair_solref[pair], float),
                    solreffriction=None if not fr.any() else fr,
                    solimp=np.array(mj.pair_solimp[pair], float),
                    margin=float(mj.pair_margin[pair]), condim=int(mj.pair_dim[pair]))
    margin = float(mj.geom_margin[g1]) + float(mj.geom_margin[g2])
    p1, p2 = int(mj.geom_priority[g1]), int(mj.geom_priority[g2])
    if p1 != p2:
        g = g1 if p1 > p2 else g2
        return dict(friction=np.array(mj.geom_friction[g], float),
                    solref=np.array(mj.geom_solref[g], float),
                    solimp=np.array(mj.geom_solimp[g], float),
                    margin=margin, condim=int(mj.geom_condim[g]))
    m1, m2 = float(mj.geom_solmix[g1]), float(mj.geom_solmix[g2])
    mix = 0.5 if m1 + m2 < 1e-15 else (1.0 if m2 < 1e-15 else 0.0 if m1 < 1e-15
                                       else m1 / (m1 + m2))
    r1, r2 = np.asarray(mj.geom_solref[g1], float), np.asarray(mj.geom_solref[g2], float)
    # direct (negative) solref: the elementwise min
    solref = mix * r1 + (1 - mix) * r2 if r1[0] > 0 and r2[0] > 0 else np.minimum(r1, r2)
    return dict(friction=np.maximum(mj.geom_friction[g1], mj.geom_friction[g2]).astype(float),
                solref=solref,
                solimp=mix * np.asarray(mj.geom_solimp[g1], float)
                + (1 - mix) * np.asarray(mj.geom_solimp[g2], float),
                margin=margin,
                condim=max(int(mj.geom_condim[g1]), int(mj.geom_condim[g2])))


def read_contact_pairs(src) -> tuple[list[dict], list[str]]:
    """The file's colliding geom pairs split into what diffmb's contacts model and what they do
    not: ``(pairs, unsupported)``. A supported pair is a sphere, capsule, box, cylinder,
    ellipsoid or mesh (its convex hull) on a moving body against either a plane or height field
    fixed to the world (``terrain`` True) or another such geom on any other body (moving, or
    fixed to the world). Each is a dict with ``geom`` and ``other`` (geom ids; ``geom`` the one
    on a moving body), their names ``geom_name`` and ``other_name``, ``terrain``, the body ids
    ``body`` and ``other_body``, MuJoCo's mixed parameters (:func:`_mixed_contact_params`) and
    ``pair`` (the explicit ``<pair>`` id or -1). ``unsupported`` lists the other pairs (SDF
    geoms, a plane or height field on a moving body) as readable strings naming both geoms and
    why. Pairs of two geoms that never move are left out (MuJoCo's contact would do nothing)."""
    mj, _ = _as_mjmodel(src)
    static = lambda g: int(mj.body_weldid[int(mj.geom_bodyid[g])]) == 0  # noqa: E731
    kind = lambda g: _GEOM_TYPES.get(int(mj.geom_type[g]), "unknown")  # noqa: E731
    pairs, bad = [], []
    for g1, g2, pair in _colliding_geom_ids(mj):
        if kind(g2) in _TERRAIN_GEOMS or (static(g1) and not static(g2)):
            g1, g2 = g2, g1
        n1, n2 = _geom_name(mj, g1), _geom_name(mj, g2)
        what = f"{n1!r} ({kind(g1)}) with {n2!r} ({kind(g2)})"
        flat = [g for g in (g1, g2) if kind(g) in _TERRAIN_GEOMS and not static(g)]
        other = [g for g in (g1, g2) if kind(g) not in _TERRAIN_GEOMS + _BODY_GEOMS]
        if other:
            bad.append(f"{what}: a {kind(other[0])} geom ({_geom_name(mj, other[0])!r}) "
                       "cannot collide in diffmb (SDF and plugin geoms are not modelled)")
        elif flat:
            bad.append(f"{what}: a {kind(flat[0])} on a moving body "
                       f"({_geom_name(mj, flat[0])!r}); only a plane or height field fixed to "
                       "the world is a ground")
        elif static(g1) and static(g2):
            continue
        else:
            if static(g1):
                g1, g2, n1, n2 = g2, g1, n2, n1
            terrain = kind(g2) in _TERRAIN_GEOMS
            pairs.append(dict(geom=g1, other=g2, geom_name=n1, other_name=n2, terrain=terrain,
                              body=int(mj.geom_bodyid[g1]), other_body=int(mj.geom_bodyid[g2]),
                              pair=pair, **_mixed_contact_params(mj, g1, g2, pair)))
    return pairs, bad


def _terrain_from_geom(mj, g, name, where=None):
    """A Plane or HeightField for a world-fixed plane/hfield geom (pose at qpos0); ``where``
    (the file) starts a refusal's message."""
    import mujoco

    from ..contacts.terrain import HeightField, Plane

    d = mujoco.MjData(mj)
    mujoco.mj_kinematics(mj, d)
    R, p = np.asarray(d.geom_xmat[g]).reshape(3, 3), np.asarray(d.geom_xpos[g])
    if _GEOM_TYPES[int(mj.geom_type[g])] == "plane":
        return Plane(R[:, 2], float(R[:, 2] @ p), name=name)
    if not np.allclose(R, np.eye(3), atol=1e-9):
        raise NotImplementedError(f"{where or '<MjModel>'}: height field geom {name!r}: only "
                                  "an axis-aligned height field "
                                  "(no rotation) is supported")
    h = int(mj.geom_dataid[g])
    nrow, ncol = int(mj.hfield_nrow[h]), int(mj.hfield_ncol[h])
    rx, ry, zmax, _ = (float(x) for x in mj.hfield_size[h])
    adr = int(mj.hfield_adr[h])
    data = np.asarray(mj.hfield_data[adr: adr + nrow * ncol], float).reshape(nrow, ncol)
    # rows run along y, columns along x; heights (nx, ny) above the geom's origin
    return HeightField(p[2] + zmax * data.T, origin=(p[0] - rx, p[1] - ry),
                       spacing=(2 * rx / (ncol - 1), 2 * ry / (nrow - 1)), name=name)


def _contact_geom(mj, g, model: Model):
    """The diffmb geom of MuJoCo geom ``g`` on its body (``"world"`` for the world body), posed
    as MuJoCo poses it in the body frame: sphere, capsule, box, cylinder and ellipsoid with
    MuJoCo's sizes, a mesh as a :class:`~diffmb.contacts.geometry.ConvexMesh` of the convex
    hull MuJoCo's compiler builds (the shape MuJoCo collides, a concave mesh too)."""
    from ..contacts.geometry import Box, Capsule, ConvexMesh, Cylinder, Ellipsoid, Sphere

    b = int(mj.geom_bodyid[g])
    body = "world" if b == 0 else model.body_names[b - 1]
    size = np.asarray(mj.geom_size[g], float)
    kw = dict(pos=np.asarray(mj.geom_pos[g], float), quat=np.asarray(mj.geom_quat[g], float),
              name=_geom_name(mj, g))
    kind = _GEOM_TYPES[int(mj.geom_type[g])]
    if kind == "sphere":
        return Sphere(body, size[0], **kw)
    if kind == "capsule":
        return Capsule(body, size[0], size[1], **kw)
    if kind == "cylinder":
        return Cylinder(body, size[0], size[1], **kw)
    if kind == "ellipsoid":
        return Ellipsoid(body, size, **kw)
    if kind == "mesh":
        return ConvexMesh.from_mjmodel(mj, g, body, name=kw["name"])
    return Box(body, size, **kw)


def _loaded_geoms(mj, pairs) -> list[str]:
    """Geoms of ``pairs`` (geom id pairs) that carry a normal force in MuJoCo's first step
    from the ``home`` keyframe (else ``qpos0``), by name."""
    import mujoco

    d = mujoco.MjData(mj)
    k = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_KEY, "home")
    if k >= 0:
        mujoco.mj_resetDataKeyframe(mj, d, k)
    mujoco.mj_step(mj, d)
    mujoco.mj_forward(mj, d)
    want = {frozenset(p) for p in pairs}
    out, f = [], np.zeros(6)
    for i in range(d.ncon):
        c = d.contact[i]
        g = (int(c.geom[0]), int(c.geom[1]))
        if frozenset(g) not in want or c.efc_address < 0:
            continue
        mujoco.mj_contactForce(mj, d, i, f)
        if f[0] > 0:
            out += [_geom_name(mj, x) for x in g if _geom_name(mj, x) not in out]
    return out


def _point_invweight(mj, p) -> float:
    """The translational inverse weight, trace(J M⁻¹ Jᵀ)/3, of the relative motion of the two
    bodies of pair ``p`` at the first geom's centre, at ``qpos0`` (for a pair whose bodies'
    ``body_invweight0`` are both 0)."""
    import mujoco

    d = mujoco.MjData(mj)
    mujoco.mj_forward(mj, d)
    x = np.array(d.geom_xpos[p["geom"]])
    J = np.zeros((3, mj.nv))
    for body, sign in ((p["body"], 1.0), (p["other_body"], -1.0)):
        if body > 0:
            jp = np.zeros((3, mj.nv))
            mujoco.mj_jac(mj, d, jp, None, x, body)
            J += sign * jp
    if not J.any():
        return 0.0
    MinvJ = np.zeros((3, mj.nv))
    mujoco.mj_solveM(mj, d, MinvJ, np.ascontiguousarray(J))  # rows: M⁻¹ Jᵢᵀ
    return float(np.sum(J * MinvJ)) / 3.0


def _mujoco_creep(mj, m_eff, solref, solimp, depth, mu):
    """Per pair, the stiction law's creep rate [m/(N s)] at ``depth`` that MuJoCo's soft
    friction has there (:func:`~diffmb.contacts.law.creep_rate`: R/b of its friction rows with
    the pair's inverse weight 1/``m_eff``, its friction solref's damping, the impedance at
    ``depth``, ``impratio`` and the cone); 0 for a frictionless pair."""
    from ..contacts.law import creep_rate
    from ..forces.elements import _soft_gains, soft_impedance

    _, b = _soft_gains(solref, solimp, xp=np)
    d = soft_impedance(depth, solimp, xp=np)
    pyramidal = int(mj.opt.cone) == 0  # mjCONE_PYRAMIDAL
    c = creep_rate(b, float(mj.opt.impratio), mu, pyramidal, d, 1.0 / m_eff)
    return np.where(mu > 0, c, 0.0)


def contacts_from_mjcf(src, model: Model | None = None, *, ignore_unsupported=False,
                       overrides=None, ignore=(), normal="linear") -> tuple:
    """The contact element (one :class:`~diffmb.contacts.Contacts` holding every pair, ground
    and body–body) for the geom pairs MuJoCo would collide (:func:`read_contact_pairs`), or
    ``()`` when there are none.

    Per pair, as MuJoCo combines the two geoms (:func:`_mixed_contact_params`): the sliding
    friction μ = ``friction[0]`` (0 for ``condim`` 1), and normal stiffness and damping from
    ``solref``/``solimp`` by :func:`~diffmb.forces.elements.mujoco_contact_gains` with the
    pair's effective mass 1/(``body_invweight0`` of one body + of the other; 0 for the world;
    where both are 0, the inverse weight of the two bodies' relative motion at the geom's
    centre, and a pair that no joint can move is left out) on every one of the pair's
    ``n_active`` points, as MuJoCo gives each contact row the pair's whole inverse weight, and
    MuJoCo's impedance at the depth where those points carry the heavier of the two bodies'
    trees (a free object: itself; a foot: the whole robot) (MuJoCo's rest penetration: a free sphere
    0.37 mm, a capsule lying flat 0.21 mm, a box on a face 0.11 mm with the defaults). The
    normal spring follows the pair's ``solimp`` about that stiffness (the element's
    ``solimp``, clamped as MuJoCo clamps it), so each point pushes as MuJoCo's contact row at
    rest at every depth, whatever share of the load it carries: MuJoCo's elliptic cone, and its
    pyramidal cone where (condim − 1) impratio = μ² (1 + μ²) (e.g. condim 3, μ = 1, impratio
    1; otherwise its edge rows push that factor times one row, not applied here:
    docs/scenes.md). The stiction spring takes the stiffness at that depth, and the damping.
    ``margin`` shifts the penetration (the contact acts from that distance, as MuJoCo's
    ``includemargin``); the geoms keep their size. Meshes collide as their convex hulls, as
    in MuJoCo (a concave mesh too). Unsupported pairs (SDF and plugin geoms, a plane or height
    field on a moving body) raise ``NotImplementedError`` naming the geoms unless
    ``ignore_unsupported`` (or ``"unsupported_contacts"`` in ``ignore``): then they are
    dropped with a warning that names them and every geom among them that carried load in
    MuJoCo's first step from the ``home`` keyframe (or ``qpos0``). Torsional friction
    (``condim`` ≥ 4, ``friction[1]``) and rolling friction (``condim`` 6, ``friction[2]``)
    act as the element's ``torsion`` and ``rolling`` (regularised Coulomb torques, see
    :func:`~diffmb.contacts.law.spin_friction`); ``"condim"`` in ``ignore`` leaves them out
    (only sliding friction then acts).
    ``overrides``: ``{geom name: {"mu": .., "stiffness": .., "damping": ..}}`` replaces the
    file's values for the pairs of that geom (on a moving body; a name that is no such
    colliding geom is an error). The element records each pair's solref (after ``refsafe``)
    as its ``timeconst`` and ``dampratio``; writing them (``force.<name>.timeconst``) rescales
    the four gains of the pairs whose solref is positive and not overridden
    (:meth:`~diffmb.contacts.element.AbstractContacts.with_solref`).

    ``normal="constraint"``: each contact's normal is MuJoCo's soft row instead of the spring
    (:class:`~diffmb.contacts.Contacts`' ``normal``), with the pair's inverse weight, solref
    and solimp. On the pyramidal cone (MuJoCo's default) with no torsional or rolling
    friction, the friction too is MuJoCo's: the cone's four edge rows per point,
    ``friction="pyramid"`` with the file's ``impratio`` (a condim-1 pair: its normal row).
    Otherwise the friction is the stiction law bounded by the rows' force, and on a pyramidal
    cone the normal row stands for the 2 (condim − 1) edge rows, whose normal force is
    (condim − 1) impratio/(μ² (1 + μ²)) times one row's at a depth (MuJoCo's
    ``mj_makeImpedance``: docs/scenes.md), so its inverse weight is the pair's times
    μ² (1 + μ²)/((condim − 1) impratio).
    """
    import warnings

    from ..contacts.element import Contacts, follow_solref, pair_n_active
    from ..forces.elements import mujoco_contact_gains, mujoco_rest_depth

    mj, where = _as_mjmodel(src)
    ignore = {str(x) for x in ((ignore,) if isinstance(ignore, str) else ignore)}
    pairs, bad = read_contact_pairs(_Named(mj, where))
    if bad and not (ignore_unsupported or "unsupported_contacts" in ignore):
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise NotImplementedError(
            f"{where}: MuJoCo would collide geom pairs that diffmb's contacts do not model: "
            + "; ".join(bad[:3]) + more + ". Pass ignore=('unsupported_contacts',) to simulate "
            "without them, or exclude them in the file (contype/conaffinity, <exclude>).")
    if bad:
        kept = {frozenset((p["geom"], p["other"])) for p in pairs}
        dropped = [(g1, g2) for g1, g2, _ in _colliding_geom_ids(mj)
                   if frozenset((g1, g2)) not in kept]
        loaded = _loaded_geoms(mj, dropped)
        warnings.warn(
            f"{where}: geom pairs dropped (ignore='unsupported_contacts'): " + "; ".join(bad)
            + (". In MuJoCo's first step these geoms carry load through them: "
               + ", ".join(repr(n) for n in loaded) + ": without them the model may fall "
               "through" if loaded else ". None of them carries load in MuJoCo's first step"),
            stacklevel=3)
    overrides = dict(overrides or {})
    known = {p["geom_name"] for p in pairs} | {p["other_name"] for p in pairs
                                               if not p["terrain"]}
    for name, ov in overrides.items():
        if name not in known:
            raise ValueError(f"{where}: contact override for {name!r}, which is not a colliding "
                             f"geom; colliding geoms: {sorted(known)}")
        bad = set(ov) - {"mu", "stiffness", "damping"}
        if bad:
            raise ValueError(f"{where}: contact override for {name!r}: unknown keys "
                             f"{sorted(bad)} (allowed: mu, stiffness, damping)")
    if not pairs:
        return ()
    if model is None:
        model = from_mjmodel(mj, where)
    made = {}

    def geom(g):
        if g not in made:
            made[g] = _contact_geom(mj, g, model)
        return made[g]

    def terrain(g, name):
        if g not in made:
            made[g] = _terrain_from_geom(mj, g, name, where)
        return made[g]

    iw = np.asarray(mj.body_invweight0, float)[:, 0]
    tree = np.asarray(mj.body_subtreemass, float)[np.asarray(mj.body_rootid, int)]
    check_choice("contacts_from_mjcf", "normal", normal, ("linear", "constraint"))
    pyramidal = int(mj.opt.cone) == 0  # mjCONE_PYRAMIDAL
    geoms, others, ovs, mus, m_pts, margins, tors, rolls, refs, follow, gain_in, fric_refs = (
        [] for _ in range(12))
    row_w = []
    for p in pairs:
        a = geom(p["geom"])
        b = terrain(p["other"], p["other_name"]) if p["terrain"] else geom(p["other"])
        w = iw[p["body"]] + (0.0 if p["terrain"] else iw[p["other_body"]])
        if not w > 0:  # neither body translates at its com (a spinner on its axis)
            w = _point_invweight(mj, p)
        if not w > 0:
            continue  # nothing can move the contact point: the pair exerts no force
        na = pair_n_active(a, b)
        m_pt = 1.0 / w / na
        solref = _solref(mj, p["solref"])
        # the most a pair can carry: the trees (free-floating or welded to the world) of its
        # bodies, the whole robot on a foot
        load = max(tree[p["body"]], 0.0 if p["terrain"] else tree[p["other_body"]])
        gain_in.append((1.0 / w, na, solref, _solimp(p["solimp"]), max(load, 1.0 / w)))
        # the friction rows' solref: the pair's solreffriction where it gives one
        fric_refs.append(solref if p.get("solreffriction") is None
                         else _solref(mj, p["solreffriction"]))
        ov = dict(overrides.get(p["other_name"], {}), **overrides.get(p["geom_name"], {}))
        if normal == "constraint" and ("stiffness" in ov or "damping" in ov):
            raise ValueError(f"contacts_from_mjcf: geom {p['geom_name']!r}: a stiffness or "
                             "damping override is a spring's; normal='constraint' has rows")
        # the pair's gains follow a fitted solref unless the file gives them directly
        # (negative solref) or an override replaces them
        direct = not solref[0] > 0 or "stiffness" in ov or "damping" in ov
        refs.append((0.02, 1.0) if direct else (float(solref[0]), float(solref[1])))
        follow.append(not direct)
        geoms.append(a)
        others.append(b)
        ovs.append(ov)
        mus.append(float(ov.get("mu", 0.0 if p["condim"] == 1 else p["friction"][0])))
        m_pts.append(m_pt)
        mu_p, cd = mus[-1], int(p["condim"])
        # (the pair's weight, and the one a single row standing for a pyramid takes)
        row_w.append((w, w * (mu_p**2 * (1.0 + mu_p**2) / ((cd - 1) * float(mj.opt.impratio))
                              if pyramidal and cd > 1 and mu_p > 0 else 1.0)))
        margins.append(p["margin"])
        # torsional friction acts from condim 4 (friction[1]), rolling from condim 6 ([2])
        tors.append(float(p["friction"][1]) if p["condim"] >= 4 else 0.0)
        rolls.append(float(p["friction"][2]) if p["condim"] >= 6 else 0.0)
    if not geoms:
        return ()
    m_eff, na, solref, solimp, load = (np.array(x, float) for x in zip(*gain_in, strict=True))
    g = np.linalg.norm(mj.opt.gravity)
    depth = mujoco_rest_depth(m_eff, na, solref, solimp, g, load=load)  # all pairs, numpy
    k, d = mujoco_contact_gains(m_eff, na, solref, solimp, g, load=load, depth=depth)
    # a given stiffness is a constant one: a flat impedance (zero width)
    given = np.array(["stiffness" in ov for ov in ovs])
    solimp[given] = (0.9, 0.9, 0.0, 0.5, 1.0)
    ks = np.array([float(ov.get("stiffness", x)) for ov, x in zip(ovs, k, strict=True)])
    bs = [float(ov.get("damping", x)) for ov, x in zip(ovs, d, strict=True)]
    m_pts = np.array(m_pts)
    spin = "condim" not in ignore and (any(tors) or any(rolls))
    kw = dict(torsion=np.array(tors), rolling=np.array(rolls)) if spin else {}
    # MuJoCo's pyramidal cone as its edge rows where every pair has one (condim 1 or 3)
    pyramid = normal == "constraint" and pyramidal and not spin
    if normal == "constraint":
        kw["invweight"] = np.array([w if pyramid else w_row for w, w_row in row_w])
    if pyramid:
        kw.update(friction="pyramid", impratio=float(mj.opt.impratio))
    elif "creep" not in ignore:
        kw["creep"] = _mujoco_creep(mj, m_eff, np.array(fric_refs), solimp, depth,
                                    np.array(mus))
    el = Contacts(geoms, others, model=model, stiffness=ks, damping=np.array(bs),
                  mu=np.array(mus), margin=np.array(margins), tangential_stiffness=ks,
                  tangential_damping=2.0 * np.sqrt(ks * m_pts), solimp=solimp,
                  solimp_depth=depth, normal=normal, **kw)
    if normal == "constraint" and model is not None:  # as MuJoCo's body_invweight0 would
        el = el.following_masses(model)
    refs = np.array(refs)
    return (follow_solref(el, refs[:, 0], refs[:, 1], follow),)


def mjcf_forces(path, *, limits=True, contacts=True, fluid=None, friction=True, ignore=(),
                limit_stiffness=None, limit_damping=None, exact_couplings=False,
                contact_overrides=None) -> tuple:
    """The force elements that make an MJCF file simulate as MuJoCo simulates it.

    Always: joint damping and springs (the Model's arrays, which :func:`load_mjcf` filled from
    the file), the file's actuators if it has any (joint or fixed-tendon transmission), fixed
    tendons (:func:`tendons_from_mjcf`), spatial tendons through sites
    (:func:`spatial_tendons_from_mjcf`), joint/tendon equalities (:func:`couplings_from_mjcf`:
    soft, as MuJoCo's; ``exact_couplings=True`` holds linear ones to round-off instead) and
    connect/weld equalities (closed loops, welds: :func:`~diffmb.io.mjcf_equality.equalities_from_mjcf`,
    MuJoCo's soft rows solved together with the soft limits, as its solver does). ``friction=True``: the joints'
    ``frictionloss`` (:func:`joint_friction_from_mjcf`). ``limits=True``: soft limits on the
    limited hinge/slide joints, as MuJoCo applies them (see :func:`joint_limits_from_mjcf`;
    ``limit_stiffness``/``limit_damping`` make them a penalty spring-damper with those gains
    instead). ``contacts=True``: one contact
    element for the geom pairs MuJoCo would collide (:func:`contacts_from_mjcf`: sphere,
    capsule, box, cylinder, ellipsoid and mesh (its convex hull) on any body against a world
    plane or height field and against each other, on two moving bodies or a moving body and
    the world; SDF and plugin geoms and a plane or height field on a moving body are refused
    naming the geoms unless ``ignore=("unsupported_contacts",)``, which drops them with a
    warning naming those that carried load in MuJoCo's first step; ``contact_overrides``
    ``{geom: {"mu", "stiffness", "damping"}}`` replaces the file's values per geom).
    ``fluid``: ``"mujoco"`` MuJoCo's inertia-box and ellipsoid fluid models (its velocity terms;
    refused at evaluation with a Model that has added inertia), ``"potential"`` buoyancy, drag and
    current (:mod:`diffmb.forces.hydro`), ``False`` none; ``None`` (default): what MuJoCo does,
    its own models where the file sets ``density`` or ``viscosity`` > 0 and none otherwise. ``gravcomp``: :class:`~diffmb.forces.GravityCompensation`, as MuJoCo's (``ignore=("gravcomp",)``
    leaves it out).
    Anything else MuJoCo would simulate and these elements do not
    (:func:`unsupported_features`: spatial tendons, flex and distance equalities, flex, plugins,
    limits and friction loss of ball and free joints, tendon ``actuatorfrcrange``, MuJoCo 4's
    polynomial springs and plasticity, the ``override``, ``sleep``, ``ipc``, ``speculative`` and
    ``diagexact`` enable flags where they act) raises ``NotImplementedError`` listing it, unless
    named in ``ignore`` (e.g. ``ignore=("spatial_tendons",)``); torsional and rolling contact
    friction (``condim`` 4/6) act (``ignore=("condim",)`` leaves them out).

    The file's ``<option><flag>`` switches act as in MuJoCo: ``gravity`` (in :func:`load_mjcf`'s
    Model), ``spring``, ``damper`` (and with both off, gravity compensation and fluid forces),
    ``actuation`` and ``<option actuatorgroupdisable>``, ``clampctrl``, ``limit``,
    ``frictionloss``, ``equality``, ``contact``, ``constraint`` (no limit, friction loss,
    equality or contact at all, so no pair is refused), ``filterparent`` and ``refsafe`` (a
    positive ``solref`` time constant is at least twice the time step). A joint's
    ``actuatorfrcrange`` clamps the sum of the actuator forces on it, as MuJoCo's
    ``qfrc_actuator``. Returns a tuple for ``simulate(forces=...)`` and :func:`diffmb.forward`.
    """
    from ..forces.elements import JointDamping, JointSpring
    from ..forces.equality import solve_together
    from .mjcf_equality import equalities_from_mjcf

    mj, where = _as_mjmodel(path)
    src = _Named(mj, where)  # every refusal below names the file
    ignored = {str(x) for x in ((ignore,) if isinstance(ignore, str) else ignore)}
    # <flag damper/spring="disable"/>: MuJoCo's passive joint forces are off
    out = [JointDamping(np.zeros(mj.nv)) if _disabled(mj, "DAMPER") else JointDamping(),
           JointSpring(np.zeros(mj.nv)) if _disabled(mj, "SPRING") else JointSpring()]
    if mj.nu:
        out.append(actuators_from_mjcf(src))
    # what the caller left out (friction=False, ...) is not refused either
    moot = {"ball_frictionloss"} if not friction else set()
    moot |= {"ball_limits"} if not limits else set()
    moot |= {"override", "ipc", "speculative"} if not contacts else set()
    missing = [f for f in unsupported_features(src) if f.split(" ")[0] not in ignored | moot]
    if missing:
        raise NotImplementedError(
            f"{where}: MuJoCo would simulate {', '.join(missing)}, which diffmb's force elements "
            "do not model yet; pass ignore=(" + ", ".join(repr(f.split(' ')[0]) for f in missing)
            + ",) to simulate without them."
        )
    if friction and not _constraints_off(mj, "FRICTIONLOSS"):
        fl = np.asarray(mj.dof_frictionloss, float).copy()
        for j in range(mj.njnt):  # ignored ball/free friction (refused above otherwise)
            if _JT[int(mj.jnt_type[j])] in ("ball", "free"):
                fl[_joint_dofs(mj, j)] = 0.0
        if np.any(fl > 0):
            out.append(joint_friction_from_mjcf(src, _hinge_slide_only=True))
    cpl = couplings_from_mjcf(src)
    if cpl is not None and exact_couplings:
        cpl = cpl.as_exact()
    for el in (tendons_from_mjcf(src, limits=limits, friction=friction),
               spatial_tendons_from_mjcf(src, limits=limits, friction=friction), cpl,
               equalities_from_mjcf(src)):
        if el is not None:
            out.append(el)
    if limits and not _constraints_off(mj, "LIMIT"):
        if read_joint_limits(src)["dof"]:
            out.append(joint_limits_from_mjcf(src, limit_stiffness, limit_damping))
    elif limit_stiffness is not None:
        out.append(joint_limits_from_mjcf(src, limit_stiffness, limit_damping or 0.0))
    if contacts not in (True, False, "constraint"):
        raise ValueError(f"mjcf_forces: contacts = {contacts!r}: True (compliant springs), "
                         "'constraint' (MuJoCo's soft rows) or False")
    if contacts:
        out += contacts_from_mjcf(src, ignore=ignored, overrides=contact_overrides,
                                  normal="constraint" if contacts == "constraint" else "linear")
    out += _fluid_forces(mj, where, fluid, ignored)
    return solve_together(out)  # limits and equality rows in one solve, as MuJoCo's


def _fluid_forces(mj, where, fluid, ignored) -> list:
    """``mjcf_forces``' fluid elements: ``fluid="mujoco"`` MuJoCo's own models
    (:func:`~diffmb.io.mjcf_fluid.mujoco_fluid_forces`), ``"potential"`` buoyancy, drag and
    current (:func:`~diffmb.io.mjcf_fluid.potential_flow_from_mjmodel`; pair it with
    ``load_mjcf(path, added_mass="potential")``), ``False`` none; ``None``: a file that has
    fluid (``density``/``viscosity`` > 0) gets MuJoCo's own models, as MuJoCo simulates it.
    Bodies with ``gravcomp`` get :class:`~diffmb.forces.GravityCompensation` (unless ignored;
    routed to actuators by ``actuatorgravcomp``: refused)."""
    from . import mjcf_fluid as hydro

    if fluid not in (None, False, "mujoco", "potential"):
        raise ValueError(f"{where}: fluid={fluid!r}; accepted: 'mujoco' (MuJoCo's inertia-box "
                         "and ellipsoid models), 'potential' (buoyancy, drag and current, with "
                         "added inertia from load_mjcf(added_mass='potential')), False (none)")
    # MuJoCo's passive forces (gravity compensation, fluid) are all off when both springs and
    # dampers are disabled; gravity compensation also needs gravity
    passive = not (_disabled(mj, "SPRING") and _disabled(mj, "DAMPER"))
    gc = np.asarray(getattr(mj, "body_gravcomp", np.zeros(0)))
    if not passive or _disabled(mj, "GRAVITY"):
        gc = np.zeros(0)
    out = []
    moving = np.asarray(mj.body_weldid).reshape(-1) != 0
    on = np.flatnonzero((gc != 0) & moving[: len(gc)]) if gc.size else np.zeros(0, int)
    if on.size:
        routed = np.flatnonzero(np.asarray(getattr(mj, "jnt_actgravcomp", np.zeros(0))))
        if routed.size and "gravcomp" not in ignored:
            raise NotImplementedError(
                f"{where}: joints {[object_name(mj, 'JOINT', j) for j in routed]} set "
                "actuatorgravcomp (MuJoCo then adds gravity compensation to the actuator force "
                "and clamps it by actuatorfrcrange); diffmb does not model that routing: pass "
                "ignore=('gravcomp',) to simulate without gravity compensation.")
        if "gravcomp" not in ignored:
            from ..forces.elements import GravityCompensation

            out.append(GravityCompensation([_body_name(mj, i) for i in on], gc[on]))
    has_fluid = passive and (mj.opt.density > 0 or mj.opt.viscosity > 0)
    if fluid is None:
        fluid = "mujoco" if has_fluid else False
    if fluid == "mujoco" and passive:
        out += list(hydro.mujoco_fluid_forces(mj, where=where))
    if fluid == "potential":
        out.append(hydro.potential_flow_from_mjmodel(mj, where=where))
    return out


def _body_name(mj, i):

    return object_name(mj, "BODY", i)
