"""Terrains: the ground that contact geometry touches (world frame, z up, at rest).

A terrain is an equinox Module with traced numbers (heights, offsets, normals) and a static
``name``. Every method works on one point and under ``vmap`` on many:

* ``height(xy)``: (2,) -> (): the ground's z above the point (x, y);
* ``normal(xy)``: (2,) -> (3,): the outward (upward) unit normal there, world frame;
* ``signed_distance(p)``: (3,) -> ((), (3,)): d > 0 above/outside the ground, d < 0 inside,
  and the outward unit normal n used for the contact (``(d, n)``).

All three are differentiable in the point and in the terrain's numbers.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..spatial.safe import safe_div
from ..validation import check_value, is_concrete

__all__ = ["AbstractTerrain", "Plane", "HeightField", "rough_terrain", "NO_GROUND"]

NO_GROUND = 1.0e6  # m: the signed distance reported where a terrain has no ground (beyond a
#                    height field's extent): a gap no contact closes


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def _name(owner, name):
    if not isinstance(name, str):
        raise TypeError(f"{owner}.name = {name!r}: must be a string")
    return name


class AbstractTerrain(eqx.Module):
    """Ground geometry: ``height``, ``normal`` and ``signed_distance`` (see the module doc).
    Concrete terrains carry a static ``name`` (used in :func:`contact_forces`' pairs)."""

    name: eqx.AbstractVar[str]

    @abc.abstractmethod
    def height(self, xy):
        raise NotImplementedError

    @abc.abstractmethod
    def normal(self, xy):
        raise NotImplementedError

    @abc.abstractmethod
    def signed_distance(self, p):
        raise NotImplementedError


class Plane(AbstractTerrain):
    """The plane {p : n·p = offset} of any orientation; ``normal`` (3,) is normalised here and
    points out of the ground (a tilted plane: ``Plane((-sin α, 0, cos α))`` rises along +x).

    ``signed_distance(p) = n·p − offset`` is exact. ``height(xy)`` solves n·(x, y, z) = offset
    for z (undefined for a vertical plane, n_z = 0: returns 0 there).
    """

    n: jnp.ndarray  # (3,) unit outward normal
    offset: jnp.ndarray  # () m
    name: str = eqx.field(static=True, default="plane")

    def __init__(self, normal=(0.0, 0.0, 1.0), offset=0.0, name: str = "plane"):
        own = f"Plane {name!r}"
        check_value(own, "normal", normal, shape=(3,))
        check_value(own, "offset", offset, shape=())
        n = _f64(normal).reshape(3)
        if is_concrete(n) and not float(jnp.sum(n * n)) > 0:
            raise ValueError(f"{own}.normal = {np.asarray(normal).tolist()}: must be a nonzero "
                             "vector (the outward normal of the ground)")
        self.n = n / jnp.sqrt(jnp.sum(n * n))
        self.offset = _f64(offset).reshape(())
        self.name = _name(own, name)

    def height(self, xy):
        xy = _f64(xy)
        return safe_div(self.offset - self.n[0] * xy[..., 0] - self.n[1] * xy[..., 1], self.n[2])

    def normal(self, xy):
        return jnp.broadcast_to(self.n, (*jnp.shape(xy)[:-1], 3))

    def signed_distance(self, p):
        p = _f64(p)
        return p @ self.n - self.offset, jnp.broadcast_to(self.n, p.shape)


# ---- height field ------------------------------------------------------------------------------


def _catmull_rom(t):
    """Catmull–Rom weights of the four samples P_{i-1..i+2} at t ∈ [0, 1] in cell i, and their
    t-derivatives: (4,), (4,). The interpolant passes through the samples, its slope at a node
    is the central difference (P_{i+1} − P_{i-1})/2, so it is C¹ across cells and reproduces
    linear functions exactly."""
    t2, t3 = t * t, t * t * t
    w = 0.5 * jnp.stack([-t + 2 * t2 - t3, 2 - 5 * t2 + 3 * t3, t + 4 * t2 - 3 * t3, -t2 + t3])
    dw = 0.5 * jnp.stack([-1 + 4 * t - 3 * t2, -10 * t + 9 * t2, 1 + 8 * t - 9 * t2,
                          -2 * t + 3 * t2])
    return w, dw


def _pad_linear(H):
    """H (nx, ny) with one ghost row/column on every side, linearly extrapolated (so that the
    end cells keep second-order slopes and a plane is reproduced exactly)."""
    H = jnp.concatenate([2 * H[:1] - H[1:2], H, 2 * H[-1:] - H[-2:-1]], axis=0)
    return jnp.concatenate([2 * H[:, :1] - H[:, 1:2], H, 2 * H[:, -1:] - H[:, -2:-1]], axis=1)


class HeightField(AbstractTerrain):
    """Ground z = h(x, y) sampled on a regular grid, interpolated bicubically (Catmull–Rom).

    ``heights`` (nx, ny) [m], traced: sample (i, j) sits at (x0 + i dx, y0 + j dy), with
    ``origin`` = (x0, y0) and ``spacing`` = (dx, dy) (traced too). nx, ny ≥ 2. The interpolant
    is C¹ (continuous normals across cells), passes through the samples and reproduces any plane
    exactly (the ghost samples beyond the edges are extrapolated linearly).

    Extent and edge (as MuJoCo's ``<hfield>``): the ground exists over the grid's rectangle
    [x0, x0 + (nx − 1) dx] × [y0, y0 + (ny − 1) dy], edges included, and nowhere else. A point
    whose (x, y) lies outside it has no ground below or above it: ``signed_distance`` returns
    the gap :data:`NO_GROUND` (10⁶ m) and the upward normal, so no contact acts there and a body
    driven off the edge falls. At the edge the decision is made per candidate point (a
    sphere's lowest point, a box's corner): a sphere is carried while its lowest point is over
    the rectangle and falls once it has passed the edge, whereas MuJoCo still collides the
    part of it that overhangs the field (within one radius of the edge). The field has no side
    walls: a body pushed against the edge from outside meets nothing.
    ``height`` and ``normal`` clamp the point onto the rectangle (the edge's height continues,
    with zero slope across the edge), for drawing and queries.

    ``signed_distance`` approximates the distance to the surface by the vertical gap times the
    normal's z component, d ≈ (z − h(x, y)) n_z: exact for a plane, first order in the gap and
    the curvature otherwise (a sphere of radius r on a bump of curvature κ is off by O(κ r²)).
    """

    heights: jnp.ndarray  # (nx, ny) m
    origin: jnp.ndarray  # (2,) m
    spacing: jnp.ndarray  # (2,) m
    name: str = eqx.field(static=True, default="heightfield")

    def __init__(self, heights, origin=(0.0, 0.0), spacing=(1.0, 1.0), name="heightfield"):
        own = f"HeightField {name!r}"
        check_value(own, "heights", heights, ndim=2)
        H = _f64(heights)
        if H.shape[0] < 2 or H.shape[1] < 2:
            raise TypeError(f"{own}.heights: expected shape (nx, ny) with nx, ny >= 2, got "
                            f"{H.shape}")
        check_value(own, "origin", origin, shape=(2,))
        sp = _f64(spacing)
        if sp.ndim > 1 or sp.size not in (1, 2):
            raise TypeError(f"{own}.spacing: expected one number or (dx, dy), got shape "
                            f"{sp.shape}")
        check_value(own, "spacing", spacing, lo=0.0, lo_open=True)
        self.heights = H
        self.origin = _f64(origin).reshape(2)
        self.spacing = jnp.broadcast_to(sp, (2,))
        self.name = _name(own, name)

    def inside(self, xy):
        """True where (x, y) lies on the grid's rectangle (edges included): where the ground
        exists."""
        nx, ny = self.heights.shape
        u = (_f64(xy) - self.origin) / self.spacing
        return jnp.all((u >= 0.0) & (u <= jnp.array([nx - 1.0, ny - 1.0])), axis=-1)

    def _eval(self, xy):
        """h, ∂h/∂x, ∂h/∂y at one point xy (2,)."""
        nx, ny = self.heights.shape
        u = (_f64(xy) - self.origin) / self.spacing
        u = jnp.clip(u, 0.0, jnp.array([nx - 1.0, ny - 1.0]))
        cell = jnp.clip(jnp.floor(u), 0.0, jnp.array([nx - 2.0, ny - 2.0]))
        t = u - cell
        i = cell.astype(jnp.int32)
        Hp = _pad_linear(self.heights)
        rows = i[0] + jnp.arange(4, dtype=jnp.int32)  # padded rows = rows i-1..i+2 of the grid
        cols = i[1] + jnp.arange(4, dtype=jnp.int32)
        P = Hp[rows[:, None], cols[None, :]]  # (4, 4)
        wx, dwx = _catmull_rom(t[0])
        wy, dwy = _catmull_rom(t[1])
        h = wx @ P @ wy
        hx = (dwx @ P @ wy) / self.spacing[0]
        hy = (wx @ P @ dwy) / self.spacing[1]
        return h, hx, hy

    def _gradient_normal(self, hx, hy):
        s = jnp.sqrt(1.0 + hx * hx + hy * hy)
        return jnp.stack([-hx / s, -hy / s, 1.0 / s])

    def height(self, xy):
        return self._eval(xy)[0]

    def normal(self, xy):
        _, hx, hy = self._eval(xy)
        return self._gradient_normal(hx, hy)

    def signed_distance(self, p):
        p = _f64(p)
        h, hx, hy = self._eval(p[:2])
        n = self._gradient_normal(hx, hy)
        inside = self.inside(p[:2])
        return (jnp.where(inside, (p[2] - h) * n[2], NO_GROUND),
                jnp.where(inside, n, jnp.array([0.0, 0.0, 1.0])))


def rough_terrain(seed: int, size=(10.0, 10.0), resolution=0.05, amplitude=0.02, wavelength=0.5,
                  n_waves: int = 64, name: str = "rough") -> HeightField:
    """A seeded random rough ground as a :class:`HeightField` centred on the world origin.

    h(x, y) = A √(2/N) Σ_k cos(κ_k · (x, y) + φ_k), a sum of N = ``n_waves`` plane waves with
    uniformly random directions, phases φ_k ∈ [0, 2π) and wavelengths drawn uniformly in
    [0.5, 1.5] × ``wavelength`` (the dominant wavelength λ), sampled on the grid and then
    shifted and scaled so that the samples have zero mean and RMS ``amplitude`` A exactly.
    ``size`` (Lx, Ly) [m] (or one number for a square), ``resolution`` = grid spacing [m]
    (use ≤ λ/8 so the bicubic interpolant follows the waves). The same ``seed`` gives the same
    ground (numpy's ``default_rng``); the heights are a traced leaf.
    """
    own = "rough_terrain"
    check_value(own, "size", size, lo=0.0, lo_open=True)
    check_value(own, "resolution", resolution, lo=0.0, lo_open=True, shape=())
    check_value(own, "amplitude", amplitude, lo=0.0, shape=())
    check_value(own, "wavelength", wavelength, lo=0.0, lo_open=True, shape=())
    check_value(own, "n_waves", n_waves, lo=1, shape=())
    if np.ndim(size) > 1 or np.size(size) not in (1, 2):
        raise TypeError(f"{own}.size: expected one number or (Lx, Ly), got {size!r}")
    Lx, Ly = np.broadcast_to(np.asarray(size, dtype=float), (2,))
    if max(Lx, Ly) / resolution > 1e4:
        raise ValueError(f"{own}: size {Lx:g} x {Ly:g} m at resolution {resolution:g} m is more "
                         "than 10000 samples per side")
    nx, ny = int(round(Lx / resolution)) + 1, int(round(Ly / resolution)) + 1
    x = -0.5 * Lx + resolution * np.arange(nx)
    y = -0.5 * Ly + resolution * np.arange(ny)
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.0, 2 * np.pi, n_waves)
    lam = wavelength * rng.uniform(0.5, 1.5, n_waves)
    phase = rng.uniform(0.0, 2 * np.pi, n_waves)
    kx, ky = 2 * np.pi / lam * np.cos(theta), 2 * np.pi / lam * np.sin(theta)
    X, Y = np.meshgrid(x, y, indexing="ij")
    H = np.sqrt(2.0 / n_waves) * np.cos(
        kx * X[..., None] + ky * Y[..., None] + phase).sum(axis=-1)
    H = H - H.mean()
    rms = np.sqrt(np.mean(H * H))
    H = H * (amplitude / rms if rms > 0 else 0.0)
    return HeightField(H, origin=(x[0], y[0]), spacing=(resolution, resolution), name=name)
