"""Study: the four-box chain in absolute coordinates with the symplectic variational integrator.

Xu & Zhong (2014). The chain is the MJCF file ``diffmb/assets/chain4.xml``, converted to
absolute coordinates (:func:`diffmb.io.mjcf_maximal.maximal_from_mjmodel`) and integrated by
:func:`diffmb.simulate` as the discrete system
:class:`diffmb.formulations.variational.VariationalSystem` at dt = 0.002 s.

Comparisons: the same chain as a tree of ball joints integrated by MuJoCo (RK4, dt = 5e-4 s;
swap in ``diffmb.simulate`` when wanted), and as the index-reduced DAE with Baumgarte
stabilisation (:class:`diffmb.formulations.maximal.MaximalDAE` by :func:`diffmb.simulate`,
diffrax Dopri8, rtol = atol = 1e-10).

``reproduce(out_dir, quick=False)`` writes ``results.json``, PNG figures and ``report.md``.
``--quick`` uses a 20 s horizon instead of 100 s (all other settings identical).
"""

from __future__ import annotations

import json
import pathlib
import time
from importlib import resources

import jax
import jax.numpy as jnp
import numpy as np

from ..formulations import maximal as mx
from ..formulations import variational as vi
from ..io.mjcf_maximal import maximal_from_mjmodel
from ..simulation import simulate
from ..spatial import quaternion as quat

DT = 0.002
SEG = 2000  # steps per call: one compilation serves the main run, the twin and the order study
SAVE_T = (0.5, 1.0, 1.5, 2.0)
ORDER_DTS = (0.004, 0.002, 0.001, 0.0005)
ORDER_T = (0.2, 0.4, 0.6, 0.8, 1.0)  # nodes of every dt in ORDER_DTS
TREE_DT = 5e-4
SAMPLE = 0.01  # s, sampling of the comparison runs
XT = np.array([-1.0, 1.0, 0.0]) / np.sqrt(2.0)  # x~ axis of the paper's plane
NRM = np.array([1.0, 1.0, 0.0]) / np.sqrt(2.0)  # normal of the x~-z plane


def chain_path() -> pathlib.Path:
    return pathlib.Path(str(resources.files("diffmb") / "assets" / "chain4.xml"))


def chain_system():
    """``(mjmodel, MaximalSystem, u0)`` of the four-box chain at rest (the paper's state)."""
    import mujoco

    mj = mujoco.MjModel.from_xml_path(str(chain_path()))
    sysm, u0 = maximal_from_mjmodel(mj)
    return mj, sysm, u0


def run_variational(sysm, u0, t1, dt=DT, p0=None, desc="variational", progress=True):
    """Every node of ``[0, t1]`` in segments of ``SEG`` steps: ``(ts, u, p, H, newton_max)``."""
    from tqdm import tqdm

    n = int(round(t1 / dt))
    if n % SEG:
        raise ValueError(f"t1 / dt = {n} must be a multiple of {SEG}")
    u = jnp.asarray(u0)
    p = vi.legendre(sysm, u, jnp.zeros_like(u)) if p0 is None else p0
    ts, us, ps, Hs, nmax = [np.zeros(1)], [np.asarray(u)[None]], [], [], 0
    system = vi.VariationalSystem(sysm, momentum=True)
    for s in tqdm(range(n // SEG), desc=desc, leave=False, disable=not progress):
        tr = simulate(system, u, p, t1=SEG * dt, dt=dt)
        if s == 0:
            ps.append(np.asarray(tr.aux["p"][:1]))
            Hs.append(np.asarray(tr.aux["energy"][:1]))
        ts.append(s * SEG * dt + np.asarray(tr.ts[1:]))
        us.append(np.asarray(tr.q[1:]))
        ps.append(np.asarray(tr.aux["p"][1:]))
        Hs.append(np.asarray(tr.aux["energy"][1:]))
        nmax = max(nmax, int(tr.aux["newton_steps_max"]))
        u, p = tr.q[-1], tr.aux["p"][-1]
    return (np.concatenate(ts), np.concatenate(us), np.concatenate(ps), np.concatenate(Hs),
            nmax)


def mujoco_tree(mj, t1, dt=TREE_DT, sample=SAMPLE, progress=True):
    """MuJoCo's own RK4 on the ball-joint tree: COMs (ns, 4, 3) and total energy at samples."""
    import mujoco
    from tqdm import tqdm

    m = mujoco.MjModel.from_xml_path(str(chain_path())) if mj is None else mj
    m.opt.timestep = dt
    m.opt.integrator = int(mujoco.mjtIntegrator.mjINT_RK4)
    m.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    every = int(round(sample / dt))
    ns = int(round(t1 / sample))
    ts, coms, E = [0.0], [d.xipos[1:].copy()], [d.energy.sum()]
    for k in tqdm(range(ns), desc="MuJoCo tree RK4", leave=False, disable=not progress):
        for _ in range(every):
            mujoco.mj_step(m, d)
        mujoco.mj_forward(m, d)
        ts.append((k + 1) * every * dt)
        coms.append(d.xipos[1:].copy())
        E.append(d.energy.sum())
    return np.array(ts), np.array(coms), np.array(E)


def mujoco_reference_at(times, dt=1e-4):
    """MuJoCo RK4 at a fine step: COMs (len(times), 4, 3) and body quaternions (…, 4, 4)."""
    import mujoco

    m = mujoco.MjModel.from_xml_path(str(chain_path()))
    m.opt.timestep = dt
    d = mujoco.MjData(m)
    out_c, out_q = [], []
    for t in times:
        for _ in range(int(round((t - d.time) / dt))):
            mujoco.mj_step(m, d)
        mujoco.mj_forward(m, d)
        out_c.append(d.xipos[1:].copy())
        out_q.append(d.xquat[1:].copy())
    return np.array(out_c), np.array(out_q)


def _com(u):
    return np.asarray(u).reshape(u.shape[0], -1, 7)[:, :, :3]


def _quat_err(u):
    q = np.asarray(u).reshape(u.shape[0], -1, 7)[:, :, 3:]
    return np.abs(np.linalg.norm(q, axis=-1) - 1.0).max(axis=1)


def _first_exceed(ts, x, thr):
    i = np.nonzero(np.abs(x) > thr)[0]
    return None if i.size == 0 else float(ts[i[0]])


def convergence_order(sysm, u0, progress=True):
    """Max COM/quaternion error at t in ORDER_T against MuJoCo (RK4, dt = 1e-4) per dt."""
    ref_c, ref_q = mujoco_reference_at(ORDER_T)
    errs, self_diff = [], []
    prev = None
    for dt in ORDER_DTS:
        tr = simulate(vi.VariationalSystem(sysm), u0, t1=SEG * dt, dt=dt)
        k = [int(round(t / dt)) for t in ORDER_T]
        assert all(abs(kk * dt - t) < 1e-12 for kk, t in zip(k, ORDER_T, strict=True)), dt
        u = np.asarray(tr.q)[k]
        c = _com(u)
        q = u.reshape(len(k), -1, 7)[:, :, 3:]
        q = q * np.sign(np.sum(q * ref_q, axis=-1, keepdims=True))
        errs.append(max(np.abs(c - ref_c).max(), np.abs(q - ref_q).max()))
        if prev is not None:
            self_diff.append(np.abs(u - prev).max())
        prev = u
    errs = np.array(errs)
    slope = np.polyfit(np.log(ORDER_DTS), np.log(errs), 1)[0]
    pair = np.log2(errs[:-1] / errs[1:])
    self_order = np.log2(np.array(self_diff[:-1]) / np.array(self_diff[1:]))
    return dict(order=float(slope), errors=errs.tolist(), pairwise=pair.tolist(),
                self_convergence_orders=self_order.tolist())


def _figures(out_dir: pathlib.Path, v: dict) -> dict:
    """The study's figures from the computed series ``v``; returns {name: file}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (ts, dH, ts_mj, E_mj, ts_dae, E_dae, qerr, qerr_dae, jerr, jerr_dae, xt, z1, T, dplane,
     com_mj, com_dae, conv, sep_mj, sep_dae, ts_tw, sep_twin) = (v[k] for k in (
        "ts", "dH", "ts_mj", "E_mj", "ts_dae", "E_dae", "qerr", "qerr_dae", "jerr",
        "jerr_dae", "xt", "z1", "T", "dplane", "com_mj", "com_dae", "conv", "sep_mj",
        "sep_dae", "ts_tw", "sep_twin"))
    figs = {}
    fig, ax = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax[0].plot(ts, dH, lw=0.6, label="variational (nodes), dt = 0.002")
    ax[0].set_ylabel("(H - H0) / |H0|")
    ax[0].legend()
    ax[1].semilogy(ts[1:], np.abs(dH[1:]) + 1e-18, lw=0.5, label="variational dt=0.002")
    ax[1].semilogy(ts_mj[1:], np.abs(E_mj[1:] / E_mj[0] - 1) + 1e-18, lw=0.8,
                   label=f"tree, MuJoCo RK4 dt={TREE_DT}")
    ax[1].semilogy(ts_dae[1:], np.abs(E_dae[1:] / E_dae[0] - 1) + 1e-18, lw=0.8,
                   label="Baumgarte DAE, Dopri8 1e-10")
    ax[1].set_ylabel("|H - H0| / |H0|")
    ax[1].set_xlabel("t [s]")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    figs["energy"] = "energy.png"
    fig.savefig(out_dir / figs["energy"], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax[0].semilogy(ts, qerr + 1e-18, lw=0.5, label="variational (nodes)")
    ax[0].semilogy(ts_dae, qerr_dae + 1e-18, lw=0.8, label="Baumgarte DAE")
    ax[0].set_ylabel("max | |q| - 1 |")
    ax[0].legend()
    ax[1].semilogy(ts, jerr + 1e-18, lw=0.5, label="variational (nodes)")
    ax[1].semilogy(ts_dae, jerr_dae + 1e-18, lw=0.8, label="Baumgarte DAE")
    ax[1].set_ylabel("max |Phi| [m]")
    ax[1].set_xlabel("t [s]")
    ax[1].legend()
    fig.tight_layout()
    figs["constraints"] = "constraints.png"
    fig.savefig(out_dir / figs["constraints"], dpi=120)
    plt.close(fig)

    fig, axs = plt.subplots(2, 2, figsize=(9, 9))
    th = np.linspace(0, 2 * np.pi, 400)
    for ax, tw in zip(axs.ravel(), (10.0, 20.0, 40.0, 100.0), strict=False):
        k = ts <= tw
        ax.plot(xt[k], z1[k], lw=0.4)
        ax.plot(1.5 * np.cos(th), 1.5 * np.sin(th), "k:", lw=0.6)
        ax.set_aspect("equal")
        note = "" if tw <= T else f" (horizon {T:.0f} s)"
        ax.set_title(f"0-{tw:.0f} s{note}")
        ax.set_xlabel("x~ = (-x + y)/sqrt 2 [m]")
        ax.set_ylabel("z [m]")
    fig.suptitle("body 1 centre of mass projected on the x~-z plane (dotted: radius 1.5 m)")
    fig.tight_layout()
    figs["com_path"] = "com_path.png"
    fig.savefig(out_dir / figs["com_path"], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.semilogy(ts, np.abs(dplane) + 1e-20, lw=0.5, label="variational dt=0.002")
    ax.semilogy(ts_mj, np.abs(com_mj[:, 0] @ NRM) + 1e-20, lw=0.8, label="tree, MuJoCo RK4")
    ax.semilogy(ts_dae, np.abs(com_dae[:, 0] @ NRM) + 1e-20, lw=0.8, label="Baumgarte DAE")
    ax.axhline(1e-6, color="k", ls=":", lw=0.8)
    ax.set_xlabel("t [s]")
    ax.set_ylabel("body 1 COM distance from plane [m]")
    ax.legend(fontsize=8)
    fig.tight_layout()
    figs["out_of_plane"] = "out_of_plane.png"
    fig.savefig(out_dir / figs["out_of_plane"], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 4))
    e = np.array(conv["errors"])
    ax.loglog(ORDER_DTS, e, "o-", label=f"variational, slope {conv['order']:.3f}")
    ax.loglog(ORDER_DTS, e[-1] * (np.array(ORDER_DTS) / ORDER_DTS[-1]) ** 2, "k:",
              label="slope 2")
    ax.set_xlabel("dt [s]")
    ax.set_ylabel("max error at t <= 1 s")
    ax.legend()
    fig.tight_layout()
    figs["convergence"] = "convergence.png"
    fig.savefig(out_dir / figs["convergence"], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    tmax = min(T, 20.0)
    k, kk, kd = ts <= tmax, ts_mj <= tmax, ts_dae <= tmax
    ax[0].plot(ts[k], xt[k], lw=0.8, label="variational")
    ax[0].plot(ts_mj[kk], com_mj[kk, 0] @ XT, "--", lw=0.8, label="tree (MuJoCo RK4)")
    ax[0].plot(ts_dae[kd], com_dae[kd, 0] @ XT, ":", lw=1.0, label="Baumgarte DAE")
    ax[0].set_ylabel("body 1 x~ [m]")
    ax[0].legend(fontsize=8)
    ax[1].plot(ts[k], z1[k], lw=0.8)
    ax[1].plot(ts_mj[kk], com_mj[kk, 0, 2], "--", lw=0.8)
    ax[1].plot(ts_dae[kd], com_dae[kd, 0, 2], ":", lw=1.0)
    ax[1].set_ylabel("body 1 z [m]")
    ax[2].semilogy(ts_mj, sep_mj + 1e-16, lw=0.8, label="variational vs tree")
    ax[2].semilogy(ts_mj, sep_dae + 1e-16, lw=0.8, label="DAE vs tree")
    ax[2].semilogy(ts_tw, sep_twin + 1e-16, lw=0.6, label="variational vs twin (1e-9 m)")
    ax[2].set_ylabel("|body 1 COM difference| [m]")
    ax[2].set_xlabel("t [s]")
    ax[2].legend(fontsize=8)
    ax[2].set_xlim(0, T)
    fig.tight_layout()
    figs["comparison"] = "comparison.png"
    fig.savefig(out_dir / figs["comparison"], dpi=120)
    plt.close(fig)

    return figs


def reproduce(out_dir: pathlib.Path, quick: bool = False) -> dict:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    T = 20.0 if quick else 100.0
    timings = {}
    mj, sysm, u0 = chain_system()

    # --- the variational integrator, dt = 0.002, every node -----------------------------------
    t = time.perf_counter()
    ts, us, ps, H, nmax = run_variational(sysm, u0, T)
    timings["variational_s"] = time.perf_counter() - t
    H0 = H[0]
    dH = (H - H0) / abs(H0)
    qerr = _quat_err(us)
    cons = jax.jit(jax.vmap(mx.joint_constraints, in_axes=(None, 0)))
    jerr = np.abs(np.asarray(cons(sysm, jnp.asarray(us)))).max(axis=1)
    com = _com(us)
    c1 = com[:, 0]
    xt, z1, dplane = c1 @ XT, c1[:, 2], c1 @ NRM
    t_out = _first_exceed(ts, dplane, 1e-6)
    com_world = {f"{t:.1f}": com[int(round(t / DT))].tolist() for t in SAVE_T}

    # --- perturbed twin (1e-9 m of body 4 along the plane): sensitivity / Lyapunov -------------
    u_tw = np.asarray(u0).copy()
    ang = 1e-9 / 1.5  # rotate body 4 about its x' axis (normal to the plane) around joint 3
    qa = np.array([np.cos(ang / 2), np.sin(ang / 2), 0.0, 0.0])
    sl = slice(21, 28)
    R4 = np.asarray(quat.to_rotmat(jnp.asarray(u_tw[sl][3:])))
    pivot = u_tw[sl][:3] + R4 @ np.array([0.0, 0.0, 1.5])
    q4 = np.asarray(quat.mul(jnp.asarray(u_tw[sl][3:]), jnp.asarray(qa)))
    u_tw[sl] = np.r_[pivot - np.asarray(quat.to_rotmat(jnp.asarray(q4))) @ np.array([0.0, 0.0, 1.5]),
                     q4]
    t = time.perf_counter()
    ts_tw, us_tw, _, _, _ = run_variational(sysm, jnp.asarray(u_tw), T, desc="perturbed twin")
    timings["twin_s"] = time.perf_counter() - t
    sep_twin = np.linalg.norm(_com(us_tw)[:, 0] - c1, axis=1)

    # --- comparisons: MuJoCo tree (RK4) and the Baumgarte DAE (Dopri8) -------------------------
    t = time.perf_counter()
    ts_mj, com_mj, E_mj = mujoco_tree(None, T)
    timings["mujoco_tree_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ts_dae = np.round(np.arange(0.0, T + 0.5 * SAMPLE, SAMPLE), 10)
    dae = simulate(mx.MaximalDAE(sysm), u0, jnp.zeros_like(u0), t1=T, dt=1e-3, saveat=ts_dae,
                   solver="dopri8", rtol=1e-10, atol=1e-10, max_steps=1_000_000, throw=False)
    u_dae, ud_dae, st_dae = np.asarray(dae.q), np.asarray(dae.v), dae.status
    timings["dae_s"] = time.perf_counter() - t
    E_dae = np.asarray(jax.jit(jax.vmap(mx.energy, in_axes=(None, 0, 0)))(sysm, u_dae, ud_dae))
    com_dae = _com(u_dae)
    jerr_dae = np.abs(np.asarray(cons(sysm, jnp.asarray(u_dae)))).max(axis=1)
    qerr_dae = _quat_err(u_dae)
    every = int(round(SAMPLE / DT))
    c1s = c1[::every]
    sep_mj = np.linalg.norm(c1s - com_mj[:, 0], axis=1)
    sep_dae = np.linalg.norm(com_dae[:, 0] - com_mj[:, 0], axis=1)
    sep_vd = np.linalg.norm(c1s - com_dae[:, 0], axis=1)

    # --- convergence order at t <= 1 s --------------------------------------------------------
    t = time.perf_counter()
    conv = convergence_order(sysm, u0)
    timings["order_s"] = time.perf_counter() - t
    ref_c, _ = mujoco_reference_at(SAVE_T)
    com_err = float(np.abs(np.array([com_world[f"{t:.1f}"] for t in SAVE_T]) - ref_c).max())

    def agree_until(sep, thr=1e-3):
        x = _first_exceed(ts_mj, sep, thr)
        return T if x is None else x

    # Lyapunov exponent: slope of log separation while 1e-7 < sep < 1e-2
    mask = (sep_twin > 1e-7) & (sep_twin < 1e-2)
    lyap = float(np.polyfit(ts_tw[mask], np.log(sep_twin[mask]), 1)[0]) if mask.sum() > 10 else None

    res = {
        "energy_rel_dev_max": float(np.abs(dH).max()),
        "quat_constraint_err_max": float(qerr.max()),
        "joint_constraint_err_max": float(jerr.max()),
        "order": conv["order"],
        "com_world": com_world,
        "out_of_plane_exceeds_1e-6_at_s": t_out,
        "horizon_s": T,
        "dt": DT,
        "quick": quick,
        "H0_J": float(H0),
        "newton_steps_max": nmax,
        "order_detail": {"dts": list(ORDER_DTS), **conv},
        "com_world_max_err_vs_mujoco_rk4_1e-4_m": com_err,
        "tree_mujoco_rk4": {
            "dt": TREE_DT,
            "energy_rel_dev_max": float(np.abs(E_mj - E_mj[0]).max() / abs(E_mj[0])),
            "out_of_plane_exceeds_1e-6_at_s": _first_exceed(ts_mj, com_mj[:, 0] @ NRM, 1e-6),
            "body1_sep_from_variational_exceeds_1e-3_at_s": agree_until(sep_mj),
        },
        "dae_baumgarte_dopri8": {
            "rtol": 1e-10,
            "atol": 1e-10,
            "alpha": 10.0,
            "beta": 10.0,
            "status": int(st_dae),
            "energy_rel_dev_max": float(np.abs(E_dae - E_dae[0]).max() / abs(E_dae[0])),
            "quat_constraint_err_max": float(qerr_dae.max()),
            "joint_constraint_err_max": float(jerr_dae.max()),
            "out_of_plane_exceeds_1e-6_at_s": _first_exceed(ts_dae, com_dae[:, 0] @ NRM, 1e-6),
            "body1_sep_from_variational_exceeds_1e-3_at_s": agree_until(sep_vd),
            "body1_sep_from_mujoco_exceeds_1e-3_at_s": agree_until(sep_dae),
        },
        "perturbed_twin": {
            "perturbation_m": 1e-9,
            "sep_exceeds_1e-3_at_s": _first_exceed(ts_tw, sep_twin, 1e-3),
            "lyapunov_estimate_per_s": lyap,
        },
        "timings_s": timings,
    }
    (out_dir / "results.json").write_text(json.dumps(res, indent=2))

    figs = _figures(out_dir, dict(
        ts=ts, dH=dH, ts_mj=ts_mj, E_mj=E_mj, ts_dae=ts_dae, E_dae=E_dae, qerr=qerr,
        qerr_dae=qerr_dae, jerr=jerr, jerr_dae=jerr_dae, xt=xt, z1=z1, T=T, dplane=dplane,
        com_mj=com_mj, com_dae=com_dae, conv=conv, sep_mj=sep_mj, sep_dae=sep_dae,
        ts_tw=ts_tw, sep_twin=sep_twin))
    (out_dir / "report.md").write_text(_report(res, figs))
    from ..viz import frames, study_replay  # the variational run, in a browser (diffmb.viz)

    with open(out_dir / "report.md", "a") as f:
        f.write("\n" + study_replay(out_dir, mx.MaximalDAE(sysm), frames(ts, us),
                                    title="four-box chain, variational integrator") + "\n")
    return res


CW_ERR = "com_world_max_err_vs_mujoco_rk4_1e-4_m"


def _fmt(x, f="{:.3g}"):
    return "never" if x is None else f.format(x)


def _report(r, figs) -> str:
    T = r["horizon_s"]
    tr, dae, tw = r["tree_mujoco_rk4"], r["dae_baumgarte_dopri8"], r["perturbed_twin"]
    od = r["order_detail"]
    quick = (
        f"**Quick run**: horizon {T:.0f} s instead of 100 s (every other setting identical); "
        "path windows beyond the horizon show the whole run.\n\n"
        if r["quick"]
        else ""
    )
    return f"""# Four-box chain, absolute coordinates, symplectic variational integrator (Xu & Zhong 2014)

{quick}Xu & Zhong (2014) section 5: four boxes (12 kg, 1 x 0.5 x 3 m, J = diag(9.25, 10, 1.25)
kg m^2) joined by ball joints, released at rest from the Euler angles (pi/4, pi/4, 0),
(pi/4, pi/4, 0), (pi/4, 3pi/4, 0), (pi/4, 3pi/4, 0), g = 9.8 m/s^2 along -z. Model:
`diffmb/assets/chain4.xml`, converted to absolute coordinates u = [r_c, q] (7 per body,
28 in all) with 4 quaternion and 12 joint constraints. Integrator: the midpoint discrete action
of eq. (35), constraints with multipliers at the nodes, one Newton solve per step
(optimistix, scaled residual < 1e-12; at most {r['newton_steps_max']} iterations were needed),
dt = {r['dt']} s, {T:.0f} s. V = 0 at z = 0; H0 = {r['H0_J']:.6f} J.

| quantity | value |
|---|---|
| energy_rel_dev_max (max abs(H - H0)/abs(H0), nodes) | {r['energy_rel_dev_max']:.3e} |
| quat_constraint_err_max (max abs(abs(q) - 1)) | {r['quat_constraint_err_max']:.3e} |
| joint_constraint_err_max [m] | {r['joint_constraint_err_max']:.3e} |
| order (positions and quaternions, t <= 1 s) | {r['order']:.3f} |
| out_of_plane_exceeds_1e-6_at_s (body 1) | {_fmt(r['out_of_plane_exceeds_1e-6_at_s'])} |
| com_world max error vs MuJoCo RK4 dt = 1e-4 [m] | {r[CW_ERR]:.2e} |

## Energy

![energy]({figs['energy']})

The Hamiltonian at the nodes is computed from the discrete momenta f_k: the constraint-force
part of f_k is removed (it is not fixed by eq. 36 -- the node multipliers of S_k are free; the
positions do not depend on that choice), giving f_k = M(u_k) v_k with v_k tangent to the
constraints, and H = v.f/2 + V. Its error oscillates with no drift (symplectic), at the
O(dt^2) level of the midpoint rule; the spikes are the fast whip-like phases of the chain. For
comparison, the tree integrated with MuJoCo's RK4 at a 4 x smaller step (dt = {tr['dt']}, 4th
order) has a max relative energy error of {tr['energy_rel_dev_max']:.2e} and the Baumgarte DAE
with Dopri8 at 1e-10 {dae['energy_rel_dev_max']:.2e}: both are more accurate per unit time
here, but neither has a structural bound -- their errors accumulate with the horizon and are
set by the step/tolerance, whereas the variational error stays bounded at any horizon
(`diffmb.bench.variational` compares costs at equal energy error).

## Constraints

![constraints]({figs['constraints']})

Quaternion norms and joint positions hold at every node to rounding (the Newton solve includes
them as equations), as in the paper's Fig. 3(b,c). The Baumgarte DAE only keeps them near zero
(quaternion {dae['quat_constraint_err_max']:.1e}, joints {dae['joint_constraint_err_max']:.1e} m).

## Convergence order

![convergence]({figs['convergence']})

Errors at t = 0.2, 0.4, 0.6, 0.8, 1 s (max over COM positions and quaternions) against MuJoCo's
RK4 at dt = 1e-4 s, for dt = {od['dts']}: {', '.join(f'{e:.2e}' for e in od['errors'])};
least-squares slope {od['order']:.3f}, pairwise {', '.join(f'{x:.3f}' for x in od['pairwise'])};
self-convergence orders {', '.join(f'{x:.3f}' for x in od['self_convergence_orders'])}.

## Body 1 in the x~-z plane

![com path]({figs['com_path']})

![out of plane]({figs['out_of_plane']})

At t = 0 all four centres of mass lie in the plane through z and x~ = (-x + y)/sqrt 2, each box
has its x' axis normal to that plane and gravity lies in it. The mirror reflection through the
plane maps the system onto itself, so the exact motion is planar: body 1's COM moves on the
circle of radius 1.5 m about O. The planar motion is, however, unstable to out-of-plane
perturbations (the ball joints do not resist rotation about z', and the planar chain itself is
chaotic), and floating-point arithmetic is not mirror-symmetric: the initial data are already
out of plane at the 1e-16 level (the compiled COMs of bodies 2-4 are 1.1e-16 m off the plane;
cos(pi/4) and sin(pi/4) round to different doubles), and every step adds rounding errors of
that size. These are amplified exponentially. Here body 1's distance from the
plane exceeds 1e-6 m at t = {_fmt(r['out_of_plane_exceeds_1e-6_at_s'])} s (tree/MuJoCo:
{_fmt(tr['out_of_plane_exceeds_1e-6_at_s'])} s, DAE: {_fmt(dae['out_of_plane_exceeds_1e-6_at_s'])}
s), after which the path leaves the plane for good, as the paper observes after ~10 s. The
precise time depends on rounding details (compiler, operation order), not on physics; it is not
a property of the integrator, and a different machine may report a somewhat different value.

## Comparison with the tree and with the stabilised DAE

![comparison]({figs['comparison']})

The three formulations agree over the first seconds to the discretisation error of the
variational integrator at dt = 0.002 (~1e-5 m), then separate: body 1's COM differs by more than
1 mm from the tree after {_fmt(tr['body1_sep_from_variational_exceeds_1e-3_at_s'])} s (DAE vs
variational: {_fmt(dae['body1_sep_from_variational_exceeds_1e-3_at_s'])} s; DAE vs tree, two
accurate solutions, {_fmt(dae['body1_sep_from_mujoco_exceeds_1e-3_at_s'])} s). The reason is
chaos: a twin variational run whose body 4 starts displaced by 1e-9 m separates at the rate
exp(lambda t) with lambda ~ {_fmt(tw['lyapunov_estimate_per_s'])} 1/s and passes 1 mm at
{_fmt(tw['sep_exceeds_1e-3_at_s'])} s. Any difference -- the O(dt^2) phase error of the
midpoint rule, RK4's truncation error and energy drift, the tolerance of Dopri8 and the
Baumgarte terms, the out-of-plane rounding -- grows at that rate, so trajectories agree only up
to a predictability horizon of a few Lyapunov times beyond which only statistical properties
(energy level, constraints, the bounded region visited) can be compared. The variational
integrator keeps those invariants: bounded energy error and exact constraints over the whole
run, whereas the explicit schemes drift.

## Assumptions and notes

* Tree reference: MuJoCo's RK4 (`mujoco` package) at dt = {tr['dt']} s on the same MJCF file
  (diffmb's own `simulate` on the tree can be swapped in).
* DAE: Lagrange's equations in the same 28 coordinates, constraints differentiated twice with
  Baumgarte terms alpha = beta = 10 1/s, diffrax Dopri8 with rtol = atol = 1e-10.
* com_world: COM positions from the variational run at dt = 0.002 s; their max deviation from
  MuJoCo's RK4 at dt = 1e-4 is {r['com_world_max_err_vs_mujoco_rk4_1e-4_m']:.1e} m (the O(dt^2)
  error of the midpoint rule).
* Wall times (s): {', '.join(f'{k} {v:.1f}' for k, v in r['timings_s'].items())}.
"""
