"""Random kinematic trees as MJCF text: topologies from a small fixed set (each topology compiles
once), parameters drawn freely with bounded mass and length ratios (cond(M) stays moderate)."""

from __future__ import annotations

import numpy as np

# (parent body index (-1 world), joints of the body) for each template
TEMPLATES = {
    "chain_mixed": [
        (-1, ["hinge"]),
        (0, ["slide"]),
        (1, ["ball"]),
        (2, ["hinge", "hinge"]),
    ],
    "floating_branches": [
        (-1, ["free"]),
        (0, ["hinge"]),
        (1, ["hinge"]),
        (0, ["ball"]),
        (3, []),  # welded body: merged into its parent for dynamics
        (0, ["slide", "hinge"]),
    ],
    "ball_tree": [
        (-1, ["ball"]),
        (0, ["ball"]),
        (0, ["hinge"]),
        (2, ["slide"]),
    ],
}


def _unit(rng):
    x = rng.normal(size=3)
    return x / np.linalg.norm(x)


def _fmt(x):
    return " ".join(f"{v:.17g}" for v in np.ravel(x))


def random_mjcf(template: str, rng: np.random.Generator, gravity=(0, 0, -9.81)) -> str:
    bodies = TEMPLATES[template]
    kids = {i: [] for i in range(-1, len(bodies))}
    for i, (p, _) in enumerate(bodies):
        kids[p].append(i)

    def body(i):
        _, joints = bodies[i]
        m = rng.uniform(0.5, 2.0)
        # a random rigid body: principal moments of a box with sides in [0.1, 0.5]
        a, b, c = rng.uniform(0.1, 0.5, size=3)
        diag = m / 12 * np.array([b * b + c * c, a * a + c * c, a * a + b * b])
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        iq = rng.normal(size=4)
        iq /= np.linalg.norm(iq)
        pos = rng.uniform(-0.6, 0.6, size=3)
        s = [f'<body name="b{i}" pos="{_fmt(pos)}" quat="{_fmt(q)}">']
        s.append(
            f'<inertial pos="{_fmt(rng.uniform(-0.2, 0.2, 3))}" quat="{_fmt(iq)}" mass="{m:.17g}"'
            f' diaginertia="{_fmt(diag)}"/>'
        )
        for k, jt in enumerate(joints):
            if jt == "free":
                s.append(f'<freejoint name="j{i}_{k}"/>')
                continue
            arm = rng.uniform(0.0, 0.1)
            s.append(
                f'<joint name="j{i}_{k}" type="{jt}" pos="{_fmt(rng.uniform(-0.2, 0.2, 3))}"'
                f' axis="{_fmt(_unit(rng))}" armature="{arm:.17g}"/>'
            )
        for c in kids[i]:
            s.append(body(c))
        s.append("</body>")
        return "\n".join(s)

    inner = "\n".join(body(i) for i in kids[-1])
    return (
        f'<mujoco model="{template}"><option gravity="{_fmt(gravity)}"/>'
        f"<worldbody>{inner}</worldbody></mujoco>"
    )
