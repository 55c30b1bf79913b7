"""The ``diffmb`` command line: reproduce the studies, identify parameters from data, benchmark.

    diffmb reproduce <study>|all --out DIR [--quick]
    diffmb identify <study> --data FILE.csv --out DIR [--resume]
    diffmb identify --model ROBOT.xml|.urdf --data FILE.csv --out DIR [--params P] [--sensors S]
    diffmb bench [--quick] --out DIR
    diffmb list
    diffmb replay RESULT.npz | --model FILE --traj FILE.csv --out DIR [--format html|gif|mp4|png]

Each study is a module ``diffmb.studies.<name>`` with ``reproduce(out_dir, quick)`` (and, where
it identifies parameters, ``identify(data_csv, out_dir, checkpoint=path)``); the benchmarks are
the modules of ``diffmb.bench``; this file is only the registry. User errors print one line and
exit with code 2; Ctrl-C exits with 130 and SIGTERM with 143, with a one-line message instead of
a traceback.

``identify`` checkpoints its fit in ``DIR/checkpoint.npz`` after every iteration. An existing
checkpoint in DIR is never silently reused nor overwritten: without ``--resume`` the command
refuses (exit 2) and suggests ``--resume`` or a fresh ``--out``; with ``--resume`` it continues
from the saved iteration (a finished fit returns at once), and says from which. A checkpoint
that is corrupt or belongs to other data or another study is refused (exit 2). Interrupted
(Ctrl-C, SIGTERM), it keeps the checkpoint and writes ``DIR/results.json`` with
``"status": "interrupted"``, the last saved iteration, its cost and named parameters, and the
command that resumes it. An interrupted ``reproduce`` deletes nothing it has written; the
message says the output is incomplete (``reproduce all`` also writes its index, marking the
interrupted study and those not run).
"""

from __future__ import annotations

import _thread
import argparse
import importlib
import inspect
import json
import os
import shlex
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

# study name on the command line -> module; order is the order of `reproduce all`
STUDIES = {
    "arm": "diffmb.studies.arm",
    "uav": "diffmb.studies.uav",
    "chain": "diffmb.studies.chain",
    "flexible-arm": "diffmb.studies.flexible_arm",
    "rover": "diffmb.studies.rover",
    "underwater": "diffmb.studies.underwater",
    "excitation": "diffmb.studies.excitation",
}

class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread (a BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` keeps going)."""


def _out_dir(path) -> Path:
    """Create the output directory ``path``, or say in one line why it cannot be."""
    out = Path(path)
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                what = "is" if p == out else f"is under {p}, which is"
                raise CLIError(f"--out {out}: {what} a file, not a directory")
            break
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CLIError(f"--out {out}: cannot create the directory ({e.strerror or e})") from None
    return out


def _study_module(name: str):
    if name not in STUDIES:
        raise CLIError(f"unknown study {name!r}; choose one of: {', '.join(STUDIES)} (or 'all')")
    try:
        return importlib.import_module(STUDIES[name])
    except ModuleNotFoundError as e:
        if e.name == STUDIES[name]:
            raise CLIError(f"study {name!r} is registered but not installed ({e.name})") from None
        raise


def _reproduce(args) -> int:
    names = list(STUDIES) if args.study == "all" else [args.study]
    for n in names:
        _study_module(n)  # fail fast on unknown names
    out = _out_dir(args.out)
    failed = []
    args.on_interrupt = lambda how: _reproduce_interrupted(args, out, names, failed, how)
    for n in names:
        mod = _study_module(n)
        d = _out_dir(out / n) if args.study == "all" else out
        args.running = n
        t0 = time.perf_counter()
        print(f"[diffmb] reproduce {n} -> {d} ({'quick' if args.quick else 'full'})", flush=True)
        try:
            mod.reproduce(d, quick=args.quick)
        except Exception:  # keep going with the other studies; report at the end
            if args.study != "all":
                raise
            traceback.print_exc()
            failed.append(n)
            continue
        print(f"[diffmb] {n}: done in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.study == "all":
        _write_index(out, names, failed)
    if failed:
        print(f"[diffmb] failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _write_index(out: Path, names, failed, interrupted=None):
    lines = ["# diffmb studies", ""]
    later = False
    for n in names:
        if n == interrupted:
            status, later = "INTERRUPTED (its output is incomplete)", True
        elif later:
            status = "not run (interrupted before)"
        else:
            status = "FAILED" if n in failed else f"[report]({n}/report.md)"
        lines.append(f"- **{n}**: {status}")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def _reproduce_interrupted(args, out: Path, names, failed, how: str) -> str:
    """After an interruption: nothing written is deleted; the index says what is missing."""
    n = getattr(args, "running", None)
    if args.study == "all" and n is not None:
        _write_index(out, names, failed, interrupted=n)
    what = f"study {n!r} did not finish" if n else "no study started"
    return (f"diffmb: reproduce {how}; the output in {out} is incomplete ({what}); the files "
            "already written are kept")


CHECKPOINT = "checkpoint.npz"  # identify's resumable state, in --out


def _identify_model(args):
    """``identify --model FILE``: :func:`diffmb.optim.identify.identify` on any robot file, as
    ``identify(data, out, checkpoint=...)`` like a study's."""
    from .optim.identify import identify

    model = Path(args.model)
    if not model.is_file():
        raise CLIError(f"--model {model}: no such file")

    def run(data, out, checkpoint=None):
        try:
            res = identify(model, data, params=args.params, sensors=args.sensors, dt=args.dt,
                           out=out, checkpoint=checkpoint,
                           shooting="multiple" if args.segments > 1 else "single",
                           segments=max(args.segments, 1),
                           ignore=tuple(x.strip() for x in (args.ignore or "").split(",")
                                        if x.strip()),
                           profile=tuple(x.strip() for x in (args.profile or "").split(",")
                                         if x.strip()), max_steps=args.max_steps)
        except (KeyError, NotImplementedError, FileNotFoundError) as e:  # a bad name or file
            raise CLIError(str(e).strip("'\"")) from None
        return res.results

    return run


def _identify(args) -> int:
    from .optim.lsq import read_checkpoint

    if (args.study is None) == (args.model is None):
        raise CLIError("identify: give exactly one of STUDY and --model FILE")
    if args.study is not None:
        for flag in ("params", "sensors", "ignore", "dt", "profile"):
            if getattr(args, flag) is not None:
                raise CLIError(f"identify: --{flag} applies to --model FILE, not to a study")
        mod = _study_module(args.study)
        if not hasattr(mod, "identify"):
            raise CLIError(f"study {args.study!r} has no identification")
        ident = mod.identify
    else:
        ident = _identify_model(args)
    what = args.study if args.study is not None else str(args.model)
    data = Path(args.data)
    if not data.is_file():
        raise CLIError(f"{data}: no such data file")
    resumable = "checkpoint" in inspect.signature(ident).parameters
    if args.resume and not resumable:
        raise CLIError(f"{what}: its identification cannot be resumed")
    out = _out_dir(args.out)
    ck = out / CHECKPOINT
    if resumable and ck.exists():
        try:
            meta, _ = read_checkpoint(ck)
        except ValueError as e:
            raise CLIError(str(e)) from None
        k, done = meta["state"]["k"], meta["state"]["done"]
        if not args.resume:
            raise CLIError(
                f"--out {out} holds the checkpoint of an earlier identification ({ck.name}, "
                f"{'finished' if done else 'unfinished'}, {k} iterations): pass --resume to "
                "continue from it, or choose a fresh --out")
        print(f"[diffmb] identify {what}: resuming from iteration {k} of {ck}",
              file=sys.stderr, flush=True)
    elif args.resume:
        print(f"[diffmb] identify {what}: no checkpoint in {out}; starting from the "
              "beginning", file=sys.stderr, flush=True)
    cmd = ["diffmb", "identify"] + ([args.study] if args.study else ["--model", str(args.model)])
    for flag in ("params", "sensors", "ignore", "dt", "profile"):
        if getattr(args, flag, None) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    if getattr(args, "segments", 1) > 1:
        cmd += ["--segments", str(args.segments)]
    resume_cmd = shlex.join(cmd + ["--data", str(data), "--out", str(out), "--resume"])
    if resumable:
        args.on_interrupt = lambda how: _identify_interrupted(out, ck, resume_cmd, how)
    try:
        res = ident(data, out, checkpoint=ck) if resumable else ident(data, out)
    except ValueError as e:  # bad data or checkpoint: the message names the file and reason
        raise CLIError(str(e)) from None
    args.on_interrupt = None
    results = out / "results.json"
    if isinstance(res, dict) and _status(results) == "interrupted":  # not left stale
        _write_json(results, {"status": "complete", **res})
    if isinstance(res, dict):
        print(json.dumps(res.get("identified", res), indent=2, default=float))
    return 0


def _status(path: Path):
    try:
        return json.loads(path.read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def _write_json(path: Path, obj):
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, default=float) + "\n")
    os.replace(tmp, path)


def _identify_interrupted(out: Path, ck: Path, resume_cmd: str, how: str) -> str:
    """Write ``out/results.json`` marked ``"interrupted"`` from the last checkpoint; the
    one-line message says how to resume."""
    from .optim.lsq import read_checkpoint

    res = {"status": "interrupted", "reason": how}
    try:
        meta, _ = read_checkpoint(ck) if ck.exists() else (None, None)
    except ValueError as e:
        meta, res["checkpoint_error"] = None, str(e)
    if meta is None:
        res.update(iteration=0, note="interrupted before the first iteration was saved")
        _write_json(out / "results.json", res)
        return (f"diffmb: identify {how} before the first iteration was saved; "
                f"{out / 'results.json'} is marked interrupted; run it again to start over")
    st = meta["state"]
    res.update(iteration=st["k"], cost=meta.get("cost", st["history"][-1]["cost"]),
               params=meta.get("params"), checkpoint=str(ck), resume=resume_cmd)
    _write_json(out / "results.json", res)
    return (f"diffmb: identify {how} after iteration {st['k']}; partial results in "
            f"{out / 'results.json'}; resume with: {resume_cmd}")


def _bench(args) -> int:
    from .bench import UnknownBenchmark, run_all, select, write_json

    try:
        select(args.only)  # unknown names fail before anything runs
    except UnknownBenchmark as e:
        raise CLIError(str(e)) from None
    out = _out_dir(args.out)
    res = run_all(out, quick=args.quick, only=args.only)
    write_json(out / "bench.json", res)
    num = lambda x, spec: "null" if x is None else format(x, spec)
    for case, r in res.items():
        print(f"{case:48s} {r['value']:12.4g} {r['unit']:10s} vs {r['peer']}: "
              f"{num(r['peer_value'], '.4g')}  ratio {num(r['ratio'], '.3g')}")
    return 0


def _replay(args) -> int:
    """``diffmb replay``: a trajectory saved by ``Trajectory.save`` (its model from the recorded
    file or the embedded text, or --model), or a CSV record (``t``, ``q_<joint>`` columns) on
    --model, written to DIR/replay.<format> (diffmb.viz)."""
    import numpy as np

    from . import viz
    from .simulation import Trajectory

    try:
        if args.result is not None:
            if args.traj is not None:
                raise CLIError("give RESULT.npz or --traj FILE.csv, not both")
            if not Path(args.result).is_file():
                raise CLIError(f"{args.result}: no such file")
            traj, info = Trajectory.load(args.result)
            model = (_replay_model(args.model) if args.model
                     else viz.model_from_info(info, where=str(args.result)))
        else:
            if args.traj is None or args.model is None:
                raise CLIError("give RESULT.npz, or both --model FILE and --traj FILE.csv")
            from .optim.sysid import read_joint_csv

            model = _replay_model(args.model)
            rec = read_joint_csv(args.traj, model)
            if rec.q is None:
                raise CLIError(f"{args.traj}: no q_<joint> columns (joints "
                               f"{list(model.joint_names)})")
            n = len(rec.t)
            traj = Trajectory(ts=rec.t, q=rec.q, v=np.zeros((n, model.nv)), status=np.int32(0),
                              t_fail=np.inf, num_steps=np.int32(n))
        out = _out_dir(args.out)
        path = viz.replay(model, traj, out / f"replay.{args.format}", frames=args.frames)
    except (ValueError, FileNotFoundError, TypeError, NotImplementedError, RuntimeError) as e:
        raise CLIError(str(e)) from None
    print(f"[diffmb] replay -> {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


def _replay_model(path):
    from .io.mjcf import load_mjcf
    from .io.urdf import load_urdf

    p = Path(path)
    if not p.is_file():
        raise CLIError(f"--model {p}: no such file")
    if p.suffix.lower() not in (".xml", ".urdf"):
        raise CLIError(f"--model {p}: unknown model file type {p.suffix!r} (MJCF .xml or .urdf)")
    return load_urdf(p) if p.suffix.lower() == ".urdf" else load_mjcf(p)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="diffmb", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reproduce", help="run a study and write results.json, figures, report.md")
    r.add_argument("study", help=f"one of {', '.join(STUDIES)}, or all")
    r.add_argument("--out", required=True, help="output directory")
    r.add_argument("--quick", action="store_true", help="shorter horizons, same contract keys")
    i = sub.add_parser("identify", help="fit parameters of a study or of any robot file to "
                       "measured data (CSV)")
    i.add_argument("study", nargs="?", default=None,
                   help=f"one of {', '.join(STUDIES)} (or give --model)")
    i.add_argument("--model", default=None,
                   help="a robot file (MJCF .xml or .urdf) instead of a study")
    i.add_argument("--params", default=None,
                   help="with --model: comma-separated parameter names, wildcards in body/joint "
                        "names (default: 'body.*.mass,joint.*.damping'), e.g. "
                        "'body.*.inertial,joint.*.armature'")
    i.add_argument("--sensors", default=None,
                   help="with --model: comma-separated <channel>.<field>, field gain, bias, "
                        "delay or noise, e.g. 'q_*.bias,q_elbow.delay,q_*.noise'")
    i.add_argument("--ignore", default=None,
                   help="with --model: MJCF features to simulate without, e.g. "
                        "'unsupported_contacts'")
    i.add_argument("--dt", type=float, default=None,
                   help="with --model: simulation step [s] (default: the MJCF timestep; 1 ms "
                        "for a URDF)")
    i.add_argument("--profile", default=None,
                   help="with --model: comma-separated scalar parameters whose profile "
                        "likelihood (refits on a grid) is reported beside the Laplace interval")
    i.add_argument("--max-steps", type=int, default=50,
                   help="with --model: Levenberg–Marquardt iterations at most (default 50)")
    i.add_argument("--segments", type=int, default=1,
                   help="with --model: multiple shooting with this many segments per record "
                        "(default 1: single shooting)")
    i.add_argument("--data", required=True, help="CSV: first column t [s], then named channels")
    i.add_argument("--out", required=True,
                   help=f"output directory; the fit is checkpointed in DIR/{CHECKPOINT}")
    i.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint in --out (without it, an existing "
                        "checkpoint is refused)")
    b = sub.add_parser("bench", help="benchmarks against peers measured in the same run")
    b.add_argument("--out", required=True)
    b.add_argument("--quick", action="store_true")
    b.add_argument("--only", default=None,
                   help="comma-separated subset of: core, sim, variational, contacts, sysid "
                        "(default: all)")
    sub.add_parser("list", help="list the studies")
    v = sub.add_parser("replay", help="write a replay (HTML page, GIF, MP4 or PNG) of a saved "
                       "trajectory or a CSV record")
    v.add_argument("result", nargs="?", default=None,
                   help="a trajectory saved by Trajectory.save (.npz)")
    v.add_argument("--model", default=None, help="robot file (MJCF .xml or .urdf)")
    v.add_argument("--traj", default=None, help="CSV record: t, then q_<joint> columns")
    v.add_argument("--out", required=True, help="output directory (writes DIR/replay.<format>)")
    v.add_argument("--format", default="html", choices=("html", "gif", "mp4", "png"))
    v.add_argument("--frames", action="store_true", help="draw every body's axes")
    return p


def _run(args) -> int:
    if args.cmd == "reproduce":
        return _reproduce(args)
    if args.cmd == "identify":
        return _identify(args)
    if args.cmd == "bench":
        return _bench(args)
    if args.cmd == "replay":
        return _replay(args)
    for n, m in STUDIES.items():
        print(f"{n:14s} {m}")
    return 0


class _Signals:
    """SIGINT and SIGTERM raised as exceptions in the main thread (KeyboardInterrupt, _Terminated)
    and raised again every second until ``main`` has caught one: an exception raised while a
    garbage-collector callback runs (JAX registers one) is printed and swallowed by Python."""

    def __init__(self):
        self.caught = False
        self.previous = {}

    def install(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # a background job ignores ^C
                    self.previous[sig] = signal.signal(sig, self._raise)
            except ValueError:  # not the main thread: leave the handlers as they are
                return

    def restore(self):
        self.caught = True
        for sig, h in self.previous.items():
            signal.signal(sig, h if h is not None else signal.SIG_DFL)

    def _raise(self, signum, frame):
        if not self.caught:
            timer = threading.Timer(1.0, self._again, (signum,))
            timer.daemon = True
            timer.start()
        raise KeyboardInterrupt if signum == signal.SIGINT else _Terminated

    def _again(self, signum):
        if not self.caught:
            _thread.interrupt_main(signum)


def _after_interrupt(args, how: str) -> str:
    """Keep the partial results of the interrupted command; its one-line message."""
    hook = getattr(args, "on_interrupt", None)
    if hook is not None:
        try:
            return hook(how)
        except Exception as e:  # noqa: BLE001 - the interruption is what is reported
            return f"diffmb: {args.cmd} {how} (its partial results could not be written: {e})"
    return f"diffmb: {args.cmd} {how}"


def _interrupted(code: int, message: str, hard: bool) -> int:
    print(message, file=sys.stderr)
    if hard:  # the process's own command line: leave at once, without the interpreter's
        # finalisation, during which XLA's still-running threads can crash the process
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def main(argv=None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``: then an interruption ends the
    process at once with its exit code); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    signals = _Signals()
    signals.install()
    try:
        return _run(args)
    except CLIError as e:
        print(f"diffmb: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signals.restore()
        msg = _after_interrupt(args, "interrupted (Ctrl-C)")
        return _interrupted(130, f"\n{msg}", argv is None)
    except _Terminated:
        signals.restore()
        return _interrupted(143, _after_interrupt(args, "terminated (SIGTERM)"), argv is None)
    finally:
        signals.restore()


if __name__ == "__main__":
    sys.exit(main())
