"""MJCF connect and weld equalities (``<equality><connect>``/``<weld>``, body or site form) as
a :class:`~diffmb.forces.equality.Equalities` element, read from MuJoCo's compiled model."""

from __future__ import annotations

import numpy as np

from .mjcf import _as_mjmodel, _constraints_off, _coupling_ids, _solref, object_name

__all__ = ["equalities_from_mjcf", "connect_weld_ids", "unsupported_equalities"]


def _eq_name(mj, e):
    import mujoco

    return mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_EQUALITY, e) or f"equality{e}"


def connect_weld_ids(src) -> list:
    """Ids of the file's equalities that :func:`equalities_from_mjcf` builds: active (``active``
    attribute, MuJoCo's ``eq_active0``) connects and welds, in body or site form, that move
    (not both bodies welded to the world); none when ``equality``/``constraint`` is disabled
    in the file's ``<flag>``."""
    import mujoco

    mj, _ = _as_mjmodel(src)
    if _constraints_off(mj, "EQUALITY"):
        return []
    kinds = (int(mujoco.mjtEq.mjEQ_CONNECT), int(mujoco.mjtEq.mjEQ_WELD))
    out = []
    for e in range(mj.neq):
        if int(mj.eq_type[e]) not in kinds or not bool(mj.eq_active0[e]):
            continue
        b1, b2 = _bodies(mj, e)
        if int(mj.body_weldid[b1]) == 0 and int(mj.body_weldid[b2]) == 0:
            continue  # both fixed to the world: MuJoCo's rows have a zero Jacobian
        out.append(e)
    return out


def unsupported_equalities(src) -> list[str]:
    """The file's active equalities that neither :func:`equalities_from_mjcf` (connect, weld)
    nor :func:`~diffmb.io.mjcf.couplings_from_mjcf` (joint equalities on hinge/slide joints,
    tendon equalities on fixed tendons) builds, each as ``"<name>: <type>"`` (type ``flex``,
    ``flexvert``, ``flexstrain``, ``distance``, or a tendon equality on a spatial tendon);
    connects and welds between two bodies fixed to the world act on nothing
    and are not listed. Empty when ``equality``/``constraint`` is disabled in ``<flag>``."""
    import mujoco

    mj, _ = _as_mjmodel(src)
    if _constraints_off(mj, "EQUALITY"):
        return []
    kinds = (int(mujoco.mjtEq.mjEQ_CONNECT), int(mujoco.mjtEq.mjEQ_WELD))
    done = set(_coupling_ids(mj))
    out = []
    for e in range(mj.neq):
        ty = int(mj.eq_type[e])
        if not bool(mj.eq_active0[e]) or ty in kinds or e in done:
            continue
        kind = mujoco.mjtEq(ty).name.removeprefix("mjEQ_").lower()
        if ty == int(mujoco.mjtEq.mjEQ_TENDON):
            kind = "tendon (on a spatial tendon)"
        out.append(f"{_eq_name(mj, e)}: {kind}")
    return out


def _bodies(mj, e):
    import mujoco

    o1, o2 = int(mj.eq_obj1id[e]), int(mj.eq_obj2id[e])
    if int(mj.eq_objtype[e]) == int(mujoco.mjtObj.mjOBJ_SITE):
        return int(mj.site_bodyid[o1]), int(mj.site_bodyid[o2])
    return o1, o2


def equalities_from_mjcf(src, model=None):
    """:class:`~diffmb.forces.equality.Equalities` of the file's (or compiled ``MjModel``'s)
    active connect and weld equalities (:func:`connect_weld_ids`), or None if it has none.

    Read from MuJoCo's compiled ``eq_data`` as its engine reads it: a body connect ties
    ``eq_data[0:3]`` in body1 to ``eq_data[3:6]`` in body2; a body weld ties the frame
    (``eq_data[3:6]``, ``eq_data[6:10]``) of body1 (the compiled ``relpose``) to the point
    ``eq_data[0:3]`` of body2, its orientation held with ``torquescale`` ``eq_data[10]``; the
    site forms tie the two sites (position and orientation). ``solref`` (with ``refsafe``: a
    positive time constant at least twice the time step) and ``solimp`` per equality;
    ``invweight`` MuJoCo's diagonal approximation (the bodies' ``body_invweight0``, translation
    and rotation). ``model``: the :func:`~diffmb.load_mjcf` Model of the same file, checked to
    have its bodies (MuJoCo's body i is ``model.body_names[i - 1]``; the world is −1).
    """
    import mujoco

    from ..forces.equality import Equalities

    mj, where = _as_mjmodel(src)
    if model is not None:
        names = tuple(object_name(mj, "BODY", i)
                      for i in range(1, mj.nbody))
        if tuple(model.body_names) != names:
            raise ValueError(f"{where}: the model's bodies {list(model.body_names)[:6]} are not "
                             f"the file's {list(names)[:6]} (load the model from this file)")
    ids = connect_weld_ids(mj)
    if not ids:
        return None
    site = int(mujoco.mjtObj.mjOBJ_SITE)
    weld = int(mujoco.mjtEq.mjEQ_WELD)
    unit = np.array([1.0, 0.0, 0.0, 0.0])
    kind, b1s, b2s, a1, a2, f1, f2, ts, sr, si, w, names = ([] for _ in range(12))
    iw = np.asarray(mj.body_invweight0, float)
    for e in ids:
        data = np.asarray(mj.eq_data[e], float)
        o1, o2 = int(mj.eq_obj1id[e]), int(mj.eq_obj2id[e])
        b1, b2 = _bodies(mj, e)
        is_weld = int(mj.eq_type[e]) == weld
        if int(mj.eq_objtype[e]) == site:
            a1.append(np.array(mj.site_pos[o1], float))
            a2.append(np.array(mj.site_pos[o2], float))
            f1.append(np.array(mj.site_quat[o1], float) if is_weld else unit)
            f2.append(np.array(mj.site_quat[o2], float) if is_weld else unit)
        elif is_weld:
            a1.append(data[3:6])
            a2.append(data[0:3])
            f1.append(data[6:10])
            f2.append(unit)
        else:
            a1.append(data[0:3])
            a2.append(data[3:6])
            f1.append(unit)
            f2.append(unit)
        kind.append("weld" if is_weld else "connect")
        b1s.append(b1 - 1)
        b2s.append(b2 - 1)
        ts.append(float(data[10]) if is_weld else 1.0)
        ref = np.array(mj.eq_solref[e], float)
        if (ref[0] > 0) != (ref[1] > 0):  # mixed forms: MuJoCo uses its default instead
            ref = np.array([0.02, 1.0])
        sr.append(_solref(mj, ref))
        si.append(np.array(mj.eq_solimp[e], float))
        w.append(iw[b1] + iw[b2])
        names.append(_eq_name(mj, e))
    try:
        return Equalities(kind, b1s, b2s, np.array(a1), np.array(a2), frame1=np.array(f1),
                          frame2=np.array(f2), torquescale=np.array(ts), solref=np.array(sr),
                          solimp=np.array(si), invweight=np.array(w), names=names)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {err}") from None
