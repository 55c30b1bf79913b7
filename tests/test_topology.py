"""Topology (diffmb.topology): span tree order, support/subtree sets, and the accessibility and
path matrices of seed 004 (Xu et al. 2018, Definitions 1 and 2), checked against the paper's
own examples (matrices written from the paper's text) and, on random trees, against the
transitive closure of the adjacency matrix computed by repeated boolean matrix products.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffmb import topology as topo

# Seed 004 §4, Fig. 4: the underwater quadruped. Its four paths, as the text lists them, are
# s0 s1 s2 s3; s0 s1 s4 s5; s0 s6 s7; s0 s8 s9: the body is s0 + s1, joined rigidly (nine
# connections, eight joint angles theta_1..theta_8); thighs s2, s4, s6, s8; shanks s3, s5, s7, s9.
QUADRUPED = [
    (0, 1, "rigid"),
    (1, 2, "joint"),
    (2, 3, "joint"),
    (1, 4, "joint"),
    (4, 5, "joint"),
    (0, 6, "joint"),
    (6, 7, "joint"),
    (0, 8, "joint"),
    (8, 9, "joint"),
]
QUADRUPED_P = [
    [1, 1, 1, 1, 0, 0, 0, 0, 0, 0],
    [1, 1, 0, 0, 1, 1, 0, 0, 0, 0],
    [1, 0, 0, 0, 0, 0, 1, 1, 0, 0],
    [1, 0, 0, 0, 0, 0, 0, 0, 1, 1],
]

# Seed 004 §2, Fig. 2: nine modules, eight joints; six paths s0 s1; s0 s2; s0 s3 s4; s0 s3 s5;
# s0 s6 s7; s0 s6 s8; "the rows of P are columns 2, 3, 5, 6, 8, 9 of A + I" (1-based).
FIG2 = [(0, 1, "joint"), (0, 2, "joint"), (0, 3, "joint"), (3, 4, "joint"), (3, 5, "joint"),
        (0, 6, "joint"), (6, 7, "joint"), (6, 8, "joint")]  # fmt: skip
FIG2_PATHS = [[0, 1], [0, 2], [0, 3, 4], [0, 3, 5], [0, 6, 7], [0, 6, 8]]


def closure(n, parent_of):
    """Reachability by boolean matrix powers of the directed adjacency (independent oracle)."""
    Adj = np.zeros((n, n), dtype=np.int64)
    for j, p in parent_of.items():
        Adj[p, j] = 1
    R = np.zeros_like(Adj)
    P = Adj.copy()
    for _ in range(n):
        R = np.minimum(R + P, 1)
        P = np.minimum(P @ Adj, 1)
    return R


def test_quadruped_path_matrix():
    P = topo.path_matrix(10, QUADRUPED)
    np.testing.assert_array_equal(P, QUADRUPED_P)
    A = topo.accessibility_matrix(10, QUADRUPED)
    assert topo.terminal_links(A) == (3, 5, 7, 9)
    assert np.all(np.diag(A) == 0)
    # built before merging: the rigid s0 -> s1 arc is in A, and s1 reaches s2..s5
    assert A[0, 1] == 1 and A[1].tolist() == [0, 0, 1, 1, 1, 1, 0, 0, 0, 0]
    assert A[0].sum() == 9
    # connection orientation in the input does not matter
    flipped = [(j, i, k) for i, j, k in reversed(QUADRUPED)]
    np.testing.assert_array_equal(topo.path_matrix(10, flipped), QUADRUPED_P)
    # the span tree keeps the paper's numbering, with the rigid connection on link 1
    t = topo.span_tree(10, QUADRUPED)
    assert t.order == tuple(range(10))
    assert t.parent == (-1, 0, 1, 2, 1, 4, 0, 6, 0, 8)
    assert t.kind[1] == "rigid" and t.kind.count("joint") == 8
    # merging the rigid connection gives a body + 4 two-link legs: 9 bodies, 8 joints
    body_of, body_parent = topo.merge_rigid(t)
    assert body_of == (0, 0, 1, 2, 3, 4, 5, 6, 7, 8)
    assert body_parent == (-1, 0, 1, 0, 3, 0, 5, 0, 7)


def test_fig2_example():
    A = topo.accessibility_matrix(9, FIG2)
    P = topo.path_matrix(9, FIG2)
    expected = np.zeros((6, 9), dtype=int)
    for k, path in enumerate(FIG2_PATHS):
        expected[k, path] = 1
    np.testing.assert_array_equal(P, expected)
    # "the rows of P are columns 2, 3, 5, 6, 8, 9 of A + I"
    cols = np.array([2, 3, 5, 6, 8, 9]) - 1
    np.testing.assert_array_equal(P, (A + np.eye(9, dtype=int))[:, cols].T)
    assert topo.terminal_links(A) == (1, 2, 4, 5, 7, 8)


def test_support_subtree():
    parent = topo.span_tree(10, QUADRUPED).parent
    assert topo.support(parent, 5) == (0, 1, 4, 5)
    assert topo.support(parent, 0) == (0,)
    assert topo.subtree(parent, 1) == (1, 2, 3, 4, 5)
    assert topo.subtree(parent, 8) == (8, 9)
    assert topo.subtree(parent, 0) == tuple(range(10))
    assert topo.children(parent, 0) == (1, 6, 8)


def test_bfs_order():
    t = topo.span_tree(10, QUADRUPED, order="bfs")
    assert t.order == (0, 1, 6, 8, 2, 4, 7, 9, 3, 5)
    assert all(p < k for k, p in enumerate(t.parent) if k > 0)
    for k in range(1, 10):
        assert t.parent_original[t.order[k]] == t.order[t.parent[k]]
    # accessibility in tree order is the relabelled one
    A = topo.accessibility_matrix(10, QUADRUPED)
    At = topo.accessibility_from_parent(t.parent)
    np.testing.assert_array_equal(At, A[np.ix_(t.order, t.order)])


@st.composite
def random_trees(draw):
    n = draw(st.integers(1, 12))
    parent = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    perm = [0] + draw(st.permutations(list(range(1, n))))  # shuffle labels, keep 0 the base
    conns = []
    for i in range(1, n):
        a, b = perm[parent[i]], perm[i]
        if draw(st.booleans()):
            a, b = b, a
        conns.append((a, b, draw(st.sampled_from(["joint", "rigid"]))))
    order = draw(st.permutations(conns))
    true_parent = {perm[i]: perm[parent[i]] for i in range(1, n)}
    return n, list(order), true_parent


@settings(max_examples=25, deadline=None)
@given(random_trees(), st.sampled_from(["dfs", "bfs"]))
def test_random_trees(tree, order):
    n, conns, true_parent = tree
    assert topo.is_tree(n, conns)
    t = topo.span_tree(n, conns, order=order)
    topo.validate_parent(t.parent, require_sorted=True)
    assert sorted(t.order) == list(range(n)) and t.order[0] == 0
    for i in range(1, n):
        assert t.parent_original[i] == true_parent[i]
    A = topo.accessibility_matrix(n, conns)
    np.testing.assert_array_equal(A, closure(n, true_parent))
    P = topo.path_matrix(n, conns)
    leaves = [i for i in range(n) if i not in true_parent.values()]
    assert P.shape == (len(leaves), n)
    for row, leaf in zip(P, leaves, strict=True):
        path = {leaf}
        j = leaf
        while j in true_parent:
            j = true_parent[j]
            path.add(j)
        assert set(np.flatnonzero(row)) == path
    for k in range(n):
        sup = topo.support(t.parent, k)
        assert sup[0] == 0 and sup[-1] == k
        sub = topo.subtree(t.parent, k)
        assert all(k in topo.support(t.parent, j) for j in sub)
        assert len(sub) == 1 + int(At_row_sum(t.parent, k))
        if order == "dfs":  # depth-first subtrees are contiguous
            assert sub == tuple(range(k, k + len(sub)))
    body_of, body_parent = topo.merge_rigid(t)
    assert len(body_parent) == 1 + sum(1 for k in t.kind if k == "joint")
    topo.validate_parent(body_parent, require_sorted=True)


def At_row_sum(parent, k):
    return topo.accessibility_from_parent(parent)[k].sum()


def test_errors_name_the_link():
    with pytest.raises(ValueError, match="cycle"):
        topo.span_tree(3, [(0, 1, "joint"), (1, 2, "joint"), (2, 0, "joint")])
    with pytest.raises(ValueError, match="link 3 is not connected"):
        topo.span_tree(4, [(0, 1, "joint"), (1, 2, "joint")])
    with pytest.raises(ValueError, match="link 5"):
        topo.check_tree(3, [(0, 1, "joint"), (1, 5, "joint")])
    with pytest.raises(ValueError, match="kind"):
        topo.check_tree(2, [(0, 1, "hinge")])
    with pytest.raises(ValueError, match="link 1 is connected to itself"):
        topo.check_tree(2, [(0, 1, "joint"), (1, 1, "joint")])
    with pytest.raises(ValueError, match="connected twice"):
        topo.check_tree(2, [(0, 1, "joint"), (1, 0, "rigid")])
    assert not topo.is_tree(3, [(0, 1, "joint")])
    assert topo.is_tree(1, [])
    # parent arrays
    with pytest.raises(ValueError, match="link 2 has a missing or invalid parent"):
        topo.validate_parent([-1, 0, 7])
    with pytest.raises(ValueError, match="link 2 has a missing or invalid parent"):
        topo.validate_parent([-1, 0, -1])
    with pytest.raises(ValueError, match="own ancestor"):
        topo.validate_parent([-1, 2, 1])
    with pytest.raises(ValueError, match="link 1 has parent 2"):
        topo.validate_parent([-1, 2, 0], require_sorted=True)
    assert topo.validate_parent([-1, 2, 0]) == (-1, 2, 0)


@st.composite
def forests(draw):
    """A Model's node_parent (span-tree order, -1 = on the world) and a body_node table."""
    n = draw(st.integers(1, 12))
    parent = [-1] + [draw(st.integers(-1, i - 1)) for i in range(1, n)]
    body_node = draw(st.lists(st.integers(-1, n - 1), min_size=1, max_size=12))
    return parent, body_node


@settings(max_examples=25, deadline=None)
@given(forests())
def test_model_forest(forest):
    """Support/subtree tables of a forest (the Model's nodes) against the closure oracle."""
    parent, body_node = forest
    n = len(parent)
    R = closure(n, {j: p for j, p in enumerate(parent) if p >= 0})  # R[i, j]: i above j
    Sm = topo.support_matrix(parent)
    np.testing.assert_array_equal(Sm, R.T + np.eye(n, dtype=int))
    assert topo.depth(parent) == tuple(R.sum(axis=0))
    order = topo.level_order(parent)
    d = [topo.depth(parent)[i] for i in order]
    assert sorted(order) == list(range(n)) and d == sorted(d)
    pos = {i: k for k, i in enumerate(order)}
    assert all(pos[p] < pos[i] for i, p in enumerate(parent) if p >= 0)
    sub = topo.subtree_bodies(parent, body_node)
    for j in range(n):
        assert sub[j] == tuple(b for b, i in enumerate(body_node) if i >= 0 and R[j, i] + (i == j))
    # with the world as link 0 the forest is a tree; its accessibility matrix (Definition 1)
    A = topo.accessibility_from_parent(topo.world_rooted(parent))
    np.testing.assert_array_equal(A[1:, 1:], R)
    assert A[0, 1:].all() and not A[:, 0].any()
