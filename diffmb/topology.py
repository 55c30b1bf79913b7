"""Kinematic topology: directed span tree, support/subtree sets, accessibility and path matrices.

Everything here is plain Python/numpy on static integers (run once, outside ``jit``); the results
are tuples of ints, hashable, suitable for static fields of a ``Model``.

Link graph
----------
``n_links`` links numbered ``0 .. n_links-1``; link 0 is the base (root). ``connections`` is a
sequence of ``(i, j, kind)`` with ``kind`` in ``{'joint', 'rigid'}``. Connections are undirected
in the input: each arc is directed away from the root (from the link nearer the base to the one
farther away), which for a tree is the only orientation in which every link is reachable.

Directed span tree (Xu et al. (2021), §2.2)
-------------------------------------------
:func:`span_tree` orders the links so that every link comes after its parent (``parent[i] < i``)
-- the ordered chain of axes ``A = (0, 1, ..., n]`` of Xu et al. (2021) -- by a depth-first (default) or
breadth-first walk from the root that visits children in increasing original index. Depth-first
order keeps every subtree contiguous (``subtree(i) = i .. i + size - 1``). A graph whose links are
already numbered that way (as the papers' are) keeps its numbering under depth-first order.

Accessibility and path matrices (Xu et al. (2018), Definitions 1 and 2)
-----------------------------------------------------------------------
Built on the link graph as given -- before rigid connections are merged -- and in the original
link numbering:

* accessibility matrix ``A`` ((n+1) x (n+1)): ``A[i, j] = 1`` iff there is a directed path from
  ``s_i`` to ``s_j`` (so the diagonal is 0; row i marks the descendants of i).
* terminal links are those whose row of ``A`` is all zero. For a terminal link ``s_i`` the
  non-zeros of row ``i`` of ``(A + I)^T`` are the links on the path from the base to ``s_i``.
* path matrix ``P`` (m x (n+1)), one row per terminal link in increasing link order:
  ``P[k, j] = 1`` iff path k contains link ``s_j``.

The topology of a Model
-----------------------
A ``Model``'s nodes form a forest in span-tree order: ``model.node_parent`` (``-1``: on the
world). The functions on parent arrays (:func:`support`, :func:`subtree`, :func:`depth`,
:func:`level_order`, :func:`support_matrix`, :func:`subtree_bodies`) take it as it is; the
accessibility and path matrices of a model are those of ``world_rooted(model.node_parent)``,
the world being link 0. The dynamics' static index tables (``diffmb.dynamics._world.Topology``)
are built from these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = [
    "KINDS",
    "SpanTree",
    "check_tree",
    "is_tree",
    "validate_parent",
    "span_tree",
    "support",
    "subtree",
    "children",
    "depth",
    "level_order",
    "support_matrix",
    "subtree_bodies",
    "world_rooted",
    "accessibility_matrix",
    "accessibility_from_parent",
    "terminal_links",
    "path_matrix",
    "path_matrix_from_parent",
    "path_support",
    "merge_rigid",
]

KINDS = ("joint", "rigid")


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _adjacency(n_links: int, connections) -> list[list[tuple[int, str]]]:
    """Check indices/kinds/duplicates and return the undirected adjacency lists."""
    if int(n_links) != n_links or n_links < 1:
        raise ValueError(f"n_links must be a positive integer, got {n_links!r}")
    n_links = int(n_links)
    adj: list[list[tuple[int, str]]] = [[] for _ in range(n_links)]
    seen: set[tuple[int, int]] = set()
    for k, conn in enumerate(connections):
        if len(conn) != 3:
            raise ValueError(f"connection {k} must be (i, j, kind), got {conn!r}")
        i, j, kind = conn
        for a in (i, j):
            if not (isinstance(a, (int, np.integer)) and 0 <= a < n_links):
                raise ValueError(f"connection {k} {conn!r}: link {a!r} is not in 0..{n_links - 1}")
        if kind not in KINDS:
            raise ValueError(f"connection {k} {conn!r}: kind must be one of {KINDS}, got {kind!r}")
        i, j = int(i), int(j)
        if i == j:
            raise ValueError(f"connection {k} {conn!r}: link {i} is connected to itself (cycle)")
        key = (min(i, j), max(i, j))
        if key in seen:
            raise ValueError(
                f"connection {k} {conn!r}: links {i} and {j} are connected twice (cycle)"
            )
        seen.add(key)
        adj[i].append((j, kind))
        adj[j].append((i, kind))
    for a in adj:
        a.sort()
    return adj


def check_tree(n_links: int, connections, root: int = 0) -> None:
    """Raise ``ValueError`` naming the offending link unless the link graph is a tree.

    Errors: index out of range, unknown kind, self-connection, duplicate connection, a cycle
    (names the link at which the walk from the root closes the loop), links not connected to
    the root (names them).
    """
    adj = _adjacency(n_links, connections)
    n = len(adj)
    if not 0 <= root < n:
        raise ValueError(f"root link {root} is not in 0..{n - 1}")
    parent = [-2] * n
    parent[root] = -1
    stack = [root]
    while stack:
        i = stack.pop()
        for j, _ in adj[i]:
            if j == parent[i]:
                continue
            if parent[j] == -1:
                raise ValueError(f"the link graph has a cycle: link {i} connects back to the base")
            if parent[j] != -2:
                raise ValueError(
                    f"the link graph has a cycle: link {j} is reached both from link "
                    f"{parent[j]} and from link {i}"
                )
            parent[j] = i
            stack.append(j)
    loose = [i for i in range(n) if parent[i] == -2]
    if loose:
        raise ValueError(
            f"link {loose[0]} is not connected to the base link {root}"
            + (f" (nor are links {loose[1:]})" if len(loose) > 1 else "")
        )


def is_tree(n_links: int, connections, root: int = 0) -> bool:
    """True if the link graph is a tree rooted at ``root`` (see :func:`check_tree`)."""
    try:
        check_tree(n_links, connections, root)
    except ValueError:
        return False
    return True


def validate_parent(parent: Sequence[int], require_sorted: bool = False) -> tuple[int, ...]:
    """Check a parent array and return it as a tuple of ints.

    ``parent[0] == -1`` (the root), every other ``parent[i]`` in ``0..n-1``, no link its own
    ancestor. With ``require_sorted``, also ``parent[i] < i``. Raises ``ValueError`` naming the
    offending link (missing/invalid parent, cycle).
    """
    p = tuple(int(x) for x in parent)
    n = len(p)
    if n == 0:
        raise ValueError("empty parent array")
    if p[0] != -1:
        raise ValueError(f"link 0 is the root and must have parent -1, got {p[0]}")
    for i in range(1, n):
        if not 0 <= p[i] < n:
            raise ValueError(
                f"link {i} has a missing or invalid parent {p[i]} (links are 0..{n - 1})"
            )
        if p[i] == i:
            raise ValueError(f"link {i} is its own parent (cycle)")
        if require_sorted and p[i] >= i:
            raise ValueError(f"link {i} has parent {p[i]} >= {i}: not in span-tree order")
    state = [0] * n  # 0 unvisited, 1 on the current walk, 2 known to reach the root
    state[0] = 2
    for i in range(1, n):
        walk = []
        j = i
        while state[j] == 0:
            state[j] = 1
            walk.append(j)
            j = p[j]
        if state[j] == 1:
            raise ValueError(
                f"link {j} is its own ancestor (cycle through links {walk[walk.index(j) :]})"
            )
        for k in walk:
            state[k] = 2
    return p


# --------------------------------------------------------------------------------------------
# Directed span tree
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SpanTree:
    """Directed span tree of a link graph (static, hashable).

    order: (n,) ``order[k]`` = original index of the k-th link in tree order (``order[0]`` = root)
    index: (n,) ``index[i]`` = tree-order position of original link i (inverse of ``order``)
    parent: (n,) parent in tree order, ``parent[0] = -1``, ``parent[k] < k``
    kind: (n,) kind of the connection from ``parent[k]`` to k (``'root'`` for k = 0)
    parent_original: (n,) parent in the original numbering, ``-1`` for the root
    kind_original: (n,) kind of the connection to the parent, original numbering
    """

    order: tuple[int, ...]
    index: tuple[int, ...]
    parent: tuple[int, ...]
    kind: tuple[str, ...]
    parent_original: tuple[int, ...]
    kind_original: tuple[str, ...]

    @property
    def n(self) -> int:
        return len(self.order)


def span_tree(n_links: int, connections, root: int = 0, order: str = "dfs") -> SpanTree:
    """Directed span tree from the root: see the module docstring.

    n_links: number of links; connections: ``[(i, j, kind), ...]``; order: ``'dfs'`` (pre-order,
    children by increasing original index; default) or ``'bfs'``. Raises ``ValueError`` naming
    the offending link if the graph is not a tree.
    """
    if order not in ("dfs", "bfs"):
        raise ValueError(f"order must be 'dfs' or 'bfs', got {order!r}")
    check_tree(n_links, connections, root)
    adj = _adjacency(n_links, connections)
    n = len(adj)
    par = [-1] * n
    knd = ["root"] * n
    seq: list[int] = []
    if order == "dfs":
        stack = [root]
        while stack:
            i = stack.pop()
            seq.append(i)
            kids = [(j, k) for j, k in adj[i] if j != par[i]]
            for j, k in kids:
                par[j], knd[j] = i, k
            stack.extend(j for j, _ in reversed(kids))
    else:
        queue = [root]
        head = 0
        while head < len(queue):
            i = queue[head]
            head += 1
            seq.append(i)
            for j, k in adj[i]:
                if j != par[i]:
                    par[j], knd[j] = i, k
                    queue.append(j)
    idx = [0] * n
    for k, i in enumerate(seq):
        idx[i] = k
    parent = tuple(-1 if par[i] < 0 else idx[par[i]] for i in seq)
    return SpanTree(
        order=tuple(seq),
        index=tuple(idx),
        parent=parent,
        kind=tuple(knd[i] for i in seq),
        parent_original=tuple(par),
        kind_original=tuple(knd),
    )


# --------------------------------------------------------------------------------------------
# Sets on a parent array
# --------------------------------------------------------------------------------------------


def support(parent: Sequence[int], i: int) -> tuple[int, ...]:
    """Links on the path from the root to link i, root first, i last (Pinocchio's ``supports``)."""
    path = []
    j = int(i)
    n = len(parent)
    while j >= 0:
        path.append(j)
        if len(path) > n:
            raise ValueError(f"link {i}: its chain of parents has a cycle")
        j = int(parent[j])
    return tuple(reversed(path))


def children(parent: Sequence[int], i: int) -> tuple[int, ...]:
    """Direct children of link i, increasing."""
    return tuple(k for k, p in enumerate(parent) if p == i)


def subtree(parent: Sequence[int], i: int) -> tuple[int, ...]:
    """Link i and all its descendants, increasing."""
    out, stack = [], [int(i)]
    while stack:
        j = stack.pop()
        out.append(j)
        stack.extend(children(parent, j))
        if len(out) > len(parent):
            raise ValueError(f"link {i}: its subtree has a cycle")
    return tuple(sorted(out))


def depth(parent: Sequence[int]) -> tuple[int, ...]:
    """Number of proper ancestors of every link (0 for a root)."""
    return tuple(len(support(parent, i)) - 1 for i in range(len(parent)))


def level_order(parent: Sequence[int]) -> tuple[int, ...]:
    """Links by depth, ties by index: each level of the tree is a contiguous range and every
    parent precedes its children (the breadth-first layout of the vectorised kernels)."""
    d = depth(parent)
    return tuple(sorted(range(len(parent)), key=lambda i: (d[i], i)))


def support_matrix(parent: Sequence[int]) -> np.ndarray:
    """(n, n) int64: ``[i, j] = 1`` iff j is in ``support(parent, i)`` (j is i or an ancestor
    of i); on a tree rooted at link 0 this is ``(A + I)^T`` of the accessibility matrix A.
    Several roots (``-1`` parents: links on the world) are allowed."""
    n = len(parent)
    out = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        out[i, list(support(parent, i))] = 1
    return out


def subtree_bodies(parent: Sequence[int], body_link: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """For every link, the bodies carried by it or by one of its descendants, increasing
    (``body_link[b]`` is the link carrying body b, ``-1`` for a body on the world)."""
    sub = [[] for _ in parent]
    for b, i in enumerate(body_link):
        for j in support(parent, i) if i >= 0 else ():
            sub[j].append(b)
    return tuple(tuple(s) for s in sub)


def world_rooted(parent: Sequence[int]) -> tuple[int, ...]:
    """The parent array of a forest (``-1``: on the world, as ``Model.node_parent``) with the
    world added as link 0 and link i renumbered i + 1: a tree rooted at link 0, to which the
    accessibility and path matrices of Xu et al. (2018) apply."""
    return (-1, *(int(p) + 1 for p in parent))


# --------------------------------------------------------------------------------------------
# Accessibility and path matrices (Xu et al. (2018))
# --------------------------------------------------------------------------------------------


def accessibility_from_parent(parent: Sequence[int]) -> np.ndarray:
    """Accessibility matrix of a directed tree given by its parent array: (n, n) int64.

    ``A[i, j] = 1`` iff link i is a proper ancestor of link j (directed path i -> j).
    """
    p = validate_parent(parent)
    return support_matrix(p).T - np.eye(len(p), dtype=np.int64)


def accessibility_matrix(n_links: int, connections, root: int = 0) -> np.ndarray:
    """Xu et al. (2018) Definition 1 on the link graph (original numbering, rigid links kept): (n, n)."""
    par = span_tree(n_links, connections, root).parent_original
    return support_matrix(par).T - np.eye(len(par), dtype=np.int64)


def terminal_links(A: np.ndarray) -> tuple[int, ...]:
    """Links whose row of the accessibility matrix is all zero, increasing."""
    A = np.asarray(A)
    return tuple(int(i) for i in np.flatnonzero(~A.any(axis=1)))


def _path_matrix_from_A(A: np.ndarray) -> np.ndarray:
    n = A.shape[0]
    AI_T = (A + np.eye(n, dtype=A.dtype)).T
    return np.stack([AI_T[i] for i in terminal_links(A)]).astype(np.int64)


def path_matrix_from_parent(parent: Sequence[int]) -> np.ndarray:
    """Path matrix of a directed tree given by its parent array: (m, n), rows by terminal link."""
    return _path_matrix_from_A(accessibility_from_parent(parent))


def path_matrix(n_links: int, connections, root: int = 0) -> np.ndarray:
    """Xu et al. (2018) Definition 2 on the link graph (original numbering): (m, n) int64.

    One row per terminal link, in increasing link order; row k is row ``t_k`` of ``(A + I)^T``.
    """
    return _path_matrix_from_A(accessibility_matrix(n_links, connections, root))


def path_support(P: np.ndarray, A: np.ndarray) -> np.ndarray:
    """(n, n) int64: ``[k, j] = 1`` iff link j is on the path from the base to link k (k
    included), read off the path matrix as Xu et al. (2018) §3.1 do: a row of ``P`` through
    ``s_k``, cut at the depth of ``s_k`` (its number of ancestors, ``Σ_i A[i, k]``)."""
    P, A = np.asarray(P), np.asarray(A)
    depth = A.sum(axis=0)
    return np.stack([P[np.flatnonzero(P[:, k])[0]] * (depth <= depth[k])
                     for k in range(A.shape[0])]).astype(np.int64)


# --------------------------------------------------------------------------------------------
# Merging rigid connections (for dynamics)
# --------------------------------------------------------------------------------------------


def merge_rigid(tree: SpanTree) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Merge links joined by ``'rigid'`` connections into bodies.

    Returns ``(body_of, body_parent)``: ``body_of[k]`` (n,) is the body of the k-th link in tree
    order (bodies numbered in tree order of their first link, so ``body_parent[b] < b``), and
    ``body_parent`` (n_bodies,) is the parent array of the bodies (``-1`` for the root body).
    """
    body_of: list[int] = []
    body_parent: list[int] = []
    for k in range(tree.n):
        if k > 0 and tree.kind[k] == "rigid":
            body_of.append(body_of[tree.parent[k]])
        else:
            body_of.append(len(body_parent))
            body_parent.append(-1 if k == 0 else body_of[tree.parent[k]])
    return tuple(body_of), tuple(body_parent)
