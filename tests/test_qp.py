import itertools

import numpy as np
import pytest

from fedmgda.qp import box_bounds, interior_point_weights, min_norm_weights, project_to_simplex


def random_gram(m: int, dim: int, rng: np.random.Generator, normalise: bool = True) -> tuple[np.ndarray, np.ndarray]:
    g = rng.normal(size=(m, dim)) + rng.normal(size=(1, dim))  # correlated, like updates
    if normalise:
        g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g @ g.T, g


def kkt_violation(gram: np.ndarray, lam: np.ndarray, lower: np.ndarray, upper: np.ndarray, tol: float = 1e-7) -> float:
    """Largest violation of the KKT conditions of min lam^T K lam over {sum=1, lower<=lam<=upper}."""
    grad = gram @ lam
    at_lower, at_upper = lam <= lower + tol, lam >= upper - tol
    free = ~at_lower & ~at_upper
    # the multiplier of sum(lam)=1: common gradient value of the free coordinates
    if free.any():
        nu = np.median(grad[free])
    else:  # every coordinate at a bound: nu anywhere in [max grad of upper ones, min grad of lower ones]
        nu = 0.5 * (grad[at_upper].max(initial=-np.inf) + grad[at_lower].min(initial=np.inf))
    violations = [
        np.abs(grad[free] - nu).max(initial=0.0),  # stationarity on free coordinates
        np.maximum(nu - grad[at_lower], 0).max(initial=0.0),  # lower bound: grad_i >= nu
        np.maximum(grad[at_upper] - nu, 0).max(initial=0.0),  # upper bound: grad_i <= nu
        abs(lam.sum() - 1.0),
        np.maximum(lower - lam, 0).max(),
        np.maximum(lam - upper, 0).max(),
    ]
    return float(max(violations))


@pytest.mark.parametrize("epsilon", [0.05, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("m", [2, 5, 10, 20])
def test_kkt_conditions_hold_on_random_instances(m, epsilon):
    rng = np.random.default_rng(m * 100 + int(epsilon * 100))
    for _ in range(5):
        gram, _ = random_gram(m, 50, rng)
        lam0 = np.full(m, 1.0 / m)
        lam = min_norm_weights(gram, epsilon)
        lower, upper = box_bounds(lam0, epsilon)
        assert kkt_violation(gram, lam, lower, upper) < 1e-6


def test_epsilon_zero_returns_lambda0_exactly():
    rng = np.random.default_rng(0)
    gram, _ = random_gram(7, 20, rng)
    lam0 = rng.dirichlet(np.ones(7))
    assert np.array_equal(min_norm_weights(gram, 0.0, lam0), lam0)
    assert np.array_equal(min_norm_weights(gram, 0.0), np.full(7, 1 / 7))


@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("epsilon", [0.1, 0.3, 1.0])
def test_brute_force_grid_agrees_for_small_m(m, epsilon):
    rng = np.random.default_rng(10 * m + int(10 * epsilon))
    gram, _ = random_gram(m, 6, rng)
    lower, upper = box_bounds(np.full(m, 1.0 / m), epsilon)
    best = np.inf
    steps = np.linspace(0, 1, 801)
    for head in itertools.product(steps, repeat=m - 1):
        lam = np.array([*head, 1 - sum(head)])
        if (lam >= lower - 1e-12).all() and (lam <= upper + 1e-12).all():
            best = min(best, lam @ gram @ lam)
    lam = min_norm_weights(gram, epsilon)
    assert lam @ gram @ lam <= best + 1e-9  # never worse than the grid
    assert lam @ gram @ lam >= best - 1e-3  # and the grid gets close to it


def test_full_simplex_gives_a_common_descent_direction():
    rng = np.random.default_rng(4)
    for m in (2, 5, 10, 30):
        gram, g = random_gram(m, 40, rng)
        lam = min_norm_weights(gram, 1.0)
        d = lam @ g
        # the min-norm point of the convex hull: <d, g_i> >= ||d||^2 for every participant
        assert ((g @ d) >= d @ d - 1e-6).all()


def test_degenerate_gram_is_solved():
    """Identical updates (a singular Gram matrix) crash quadprog; here any feasible lambda works."""
    g = np.ones((4, 3))
    lam = min_norm_weights(g @ g.T, 1.0)
    assert abs(lam.sum() - 1) < 1e-12 and (lam >= 0).all()
    zero = min_norm_weights(np.zeros((3, 3)), 1.0)
    assert np.allclose(zero, 1 / 3)


def test_two_users_closed_form():
    """For m=2 on the simplex lambda_1 = clip(<u2-u1, u2>/||u1-u2||^2, 0, 1) (docs/protocol.md §4.3)."""
    rng = np.random.default_rng(5)
    for _ in range(10):
        u = rng.normal(size=(2, 8))
        expected = np.clip((u[1] - u[0]) @ u[1] / np.sum((u[0] - u[1]) ** 2), 0, 1)
        assert abs(min_norm_weights(u @ u.T, 1.0)[0] - expected) < 1e-6


def test_project_to_simplex():
    v = np.array([0.8, 0.6, -0.2])
    p = project_to_simplex(v)
    assert np.allclose(p, [0.6, 0.4, 0.0])
    assert np.allclose(project_to_simplex(np.array([0.3, 0.7])), [0.3, 0.7])


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        min_norm_weights(np.eye(3), -0.1)
    with pytest.raises(ValueError):
        min_norm_weights(np.eye(3), 0.5, np.array([0.5, 0.5, 0.5]))
    with pytest.raises(FloatingPointError):
        min_norm_weights(np.full((2, 2), np.nan), 1.0)


def min_norm(gram: np.ndarray, lam: np.ndarray) -> float:
    return float(lam @ gram @ lam)


@pytest.mark.parametrize("epsilon", [0.05, 0.2, 0.5, 1.0])
def test_two_updates_closed_form_agrees_with_the_interior_point_solver(epsilon):
    """m = 2 (Adult) is solved in closed form; cvxopt's answer on the same problems, raw and
    normalised updates, the box active or not, and degenerate pairs: equal updates, a zero update,
    opposite updates, nearly equal updates, updates of very different norms."""
    rng = np.random.default_rng(int(epsilon * 100))
    pairs = [random_gram(2, 8, rng, normalise=k % 2 == 0)[1] for k in range(40)]
    u = rng.normal(size=8)
    pairs += [np.stack([u, u]), np.stack([u, 0 * u]), np.stack([0 * u, u]), np.stack([u, -u]), np.stack([u, 3 * u]),
              np.stack([u, u + 1e-9 * rng.normal(size=8)]), np.stack([1e-6 * u, rng.normal(size=8)])]
    lower, upper = box_bounds(np.full(2, 0.5), epsilon)
    for g in pairs:
        gram = g @ g.T
        lam = min_norm_weights(gram, epsilon)
        assert abs(lam.sum() - 1) < 1e-12 and (lam >= lower - 1e-12).all() and (lam <= upper + 1e-12).all()
        scale = gram.diagonal().max()
        reference = interior_point_weights(gram / scale, lower, upper)
        # the closed form is exact (KKT) and at least as good as cvxopt's answer (up to the
        # rounding of the Gram matrix: equal updates); the same weights up to the interior-point
        # accuracy where the minimiser is unique (the parabola is curved)
        assert kkt_violation(gram / scale, lam, lower, upper, tol=1e-12) < 1e-9
        assert min_norm(gram, lam) <= min_norm(gram, reference) + 1e-8 * scale
        if np.sum((g[0] - g[1]) ** 2) > 1e-6 * scale:
            assert np.allclose(lam, reference, atol=1e-5)
    same = min_norm_weights(np.ones((2, 2)), epsilon)
    assert same.tolist() == [0.5, 0.5]  # equal updates: every weighting is the same direction; uniform
    assert min_norm_weights(np.array([[0.0, 0.0], [0.0, 4.0]]), epsilon)[0] == upper[0]  # a zero update: as much weight as the box allows
