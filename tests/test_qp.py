import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from toy_federated import make_toy_federated, toy_config

import fedmgda.algorithms.qp
from fedmgda.algorithms.qp import (
    active_set_weights,
    box_bounds,
    interior_point_weights,
    min_norm_weights,
    project_to_simplex,
)
from fedmgda.scheduler import run


def random_gram(m: int, dim: int, rng: np.random.Generator,
                normalise: bool = True) -> tuple[np.ndarray, np.ndarray]:
    g = rng.normal(size=(m, dim)) + rng.normal(size=(1, dim))  # correlated, like updates
    if normalise:
        g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g @ g.T, g


def kkt_violation(gram: np.ndarray, lam: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                  tol: float = 1e-7) -> float:
    """Largest violation of the KKT conditions of min lam^T K lam over {sum=1,
    lower<=lam<=upper}."""
    grad = gram @ lam
    at_lower, at_upper = lam <= lower + tol, lam >= upper - tol
    free = ~at_lower & ~at_upper
    # the multiplier of sum(lam)=1: common gradient value of the free coordinates
    if free.any():
        nu = np.median(grad[free])
    # every coordinate at a bound: nu anywhere in [max grad of upper ones, min grad of lower ones]
    else:
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
    """For m=2 on the simplex lambda_1 = clip(<u2-u1, u2>/||u1-u2||^2, 0, 1) (docs/protocol.md
    §4.3)."""
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
    pairs += [np.stack([u, u]), np.stack([u, 0 * u]), np.stack([0 * u, u]), np.stack([u, -u]),
              np.stack([u, 3 * u]),
              np.stack([u, u + 1e-9 * rng.normal(size=8)]),
              np.stack([1e-6 * u, rng.normal(size=8)])]
    lower, upper = box_bounds(np.full(2, 0.5), epsilon)
    for g in pairs:
        gram = g @ g.T
        lam = min_norm_weights(gram, epsilon)
        assert (abs(lam.sum() - 1) < 1e-12 and (lam >= lower - 1e-12).all()
                and (lam <= upper + 1e-12).all())
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
    # equal updates: every weighting is the same direction; uniform
    assert same.tolist() == [0.5, 0.5]
    # a zero update: as much weight as the box allows
    assert min_norm_weights(np.array([[0.0, 0.0], [0.0, 4.0]]), epsilon)[0] == upper[0]


# ------------------------------------------------------------------ exactness (the finishing step)
def exact_kkt_point(gram, lower, upper, states):
    """The exact (rational) KKT point of min lam^T K lam over {sum = 1, lower <= lam <= upper} with
    coordinate i at its lower bound (states[i] == "l"), upper bound ("u") or free ("f"), or None
    when that choice has none. ``gram``, ``lower``, ``upper``: Fractions."""
    n = len(gram)
    free = [i for i in range(n) if states[i] == "f"]
    bound = {"l": lower, "u": upper}
    lam = [bound[s][i] if s in bound else None for i, s in enumerate(states)]
    fixed_sum = sum(x for x in lam if x is not None)
    if free:
        # [K_FF -1; 1 0] (lam_F, nu) = (-K_FB lam_B, 1 - sum lam_B), by Gaussian elimination
        fixed = [j for j in range(n) if lam[j] is not None]
        rows = [[gram[i][j] for j in free] + [Fraction(-1)]
                + [-exact_dot([gram[i][j] for j in fixed], [lam[j] for j in fixed])] for i in free]
        rows.append([Fraction(1)] * len(free) + [Fraction(0), 1 - fixed_sum])
        solution = solve_rational(rows)
        if solution is None:
            return None
        for i, value in zip(free, solution):
            lam[i] = value
        if any(not lower[i] <= lam[i] <= upper[i] for i in free):
            return None
        nu = solution[-1]
    elif fixed_sum != 1:
        return None
    gradient = [exact_dot(row, lam) for row in gram]
    if not free:  # nu anywhere between the upper ones' largest gradient and the lower ones' least
        nu = max((gradient[i] for i in range(n) if states[i] == "u"), default=None)
        lowest = min((gradient[i] for i in range(n) if states[i] == "l"), default=None)
        if nu is None or (lowest is not None and lowest < nu):
            nu = lowest
    if any(gradient[i] < nu for i in range(n) if states[i] == "l"):
        return None
    if any(gradient[i] > nu for i in range(n) if states[i] == "u"):
        return None
    return lam


def exact_dot(a, b):
    """sum a_i b_i of Fractions, over common denominators (integer products: fast)."""
    if not a:
        return Fraction(0)
    da, db = math.lcm(*(x.denominator for x in a)), math.lcm(*(y.denominator for y in b))
    return Fraction(sum(x.numerator * (da // x.denominator) * y.numerator * (db // y.denominator)
                        for x, y in zip(a, b)), da * db)


def solve_rational(rows):
    """One solution of the square augmented system ``rows`` in exact arithmetic, or None if it is
    inconsistent: Bareiss' fraction-free elimination on integer rows when the matrix is regular,
    Gauss-Jordan on Fractions (free unknowns at 0) when it is singular."""
    size = len(rows)
    integer_rows = []
    for row in rows:
        common = math.lcm(*(x.denominator for x in row))
        integer_rows.append([x.numerator * (common // x.denominator) for x in row])
    previous = 1
    for k in range(size):
        pivot = next((i for i in range(k, size) if integer_rows[i][k] != 0), None)
        if pivot is None:
            return gauss_jordan(rows)
        integer_rows[k], integer_rows[pivot] = integer_rows[pivot], integer_rows[k]
        top = integer_rows[k]
        for row in integer_rows[k + 1:]:
            row[k + 1:] = [(a * top[k] - row[k] * b) // previous
                           for a, b in zip(row[k + 1:], top[k + 1:])]
            row[k] = 0
        previous = top[k]
    solution = [Fraction(0)] * size
    for k in reversed(range(size)):
        row = integer_rows[k]
        rest = sum(row[j] * solution[j] for j in range(k + 1, size))
        solution[k] = Fraction(row[size] - rest) / row[k]
    return solution


def gauss_jordan(rows):
    """One solution of the augmented system ``rows`` in Fractions (free unknowns at 0), or None if
    it is inconsistent."""
    rows = [row[:] for row in rows]
    unknowns = len(rows[0]) - 1
    pivots, r = [], 0
    for c in range(unknowns):
        pivot = next((k for k in range(r, len(rows)) if rows[k][c] != 0), None)
        if pivot is None:
            continue
        rows[r], rows[pivot] = rows[pivot], rows[r]
        for k in range(len(rows)):
            if k != r and rows[k][c] != 0:
                factor = rows[k][c] / rows[r][c]
                rows[k] = [a - factor * b for a, b in zip(rows[k], rows[r])]
        pivots.append(c)
        r += 1
    if any(all(x == 0 for x in row[:-1]) and row[-1] != 0 for row in rows):
        return None
    solution = [Fraction(0)] * unknowns
    for k, c in enumerate(pivots):
        solution[c] = rows[k][-1] / rows[k][c]
    return solution


def rational(values):
    return [Fraction(float(x)) for x in values]


def rational_gram(gram):
    """The exact symmetric part of a float Gram matrix, which has the package's minimiser."""
    n = len(gram)
    return [[(Fraction(float(gram[i][j])) + Fraction(float(gram[j][i]))) / 2 for j in range(n)]
            for i in range(n)]


def enumerated_minimiser(gram, lower, upper):
    """The exact minimiser by enumerating every choice of bounds (3^n, small n): the first exact
    KKT point, a minimiser of the convex problem. Independent of the package's solver."""
    exact_gram, lo, hi = rational_gram(gram), rational(lower), rational(upper)
    for states in itertools.product("luf", repeat=len(gram)):
        lam = exact_kkt_point(exact_gram, lo, hi, states)
        if lam is not None:
            return lam
    raise AssertionError("no KKT point: the problem is infeasible")


def certified_minimiser(gram, lower, upper, weights):
    """The exact minimiser on the bounds that ``weights`` sits on, certified by the exact KKT
    conditions (which prove it optimal); for n too large to enumerate. None when not certified."""
    states = ["l" if w == lo else "u" if w == hi else "f"
              for w, lo, hi in zip(weights, lower, upper)]
    return exact_kkt_point(rational_gram(gram), rational(lower), rational(upper), states)


def exact_distance(gram, weights, exact):
    """max |weights - exact| and the distance of their directions, ||sum (w_i - x_i) g_i||, both
    relative (the direction's to the largest update norm), computed exactly."""
    difference = [Fraction(float(w)) - x for w, x in zip(weights, exact)]
    direction = exact_dot(difference, [exact_dot(row, difference) for row in rational_gram(gram)])
    scale = Fraction(float(max(np.diag(gram)))) or Fraction(1)
    return float(max(abs(d) for d in difference)), float(direction / scale) ** 0.5


def kkt_residual(gram, lam, lower, upper):
    """The largest KKT residual of ``lam`` relative to the Gram matrix's scale: stationarity on the
    free weights, the bound multipliers' signs, complementary slackness, feasibility. A weight
    within 1e-14 of a bound counts as on it."""
    quadratic = 0.5 * (gram + gram.T) / max(np.diag(gram).max(), np.finfo(float).tiny)
    grad = quadratic @ lam
    at_lower, at_upper = lam <= lower + 1e-14, lam >= upper - 1e-14
    free = ~at_lower & ~at_upper
    if free.any():
        nu = float(np.mean(grad[free]))
    else:
        ends = [grad[at_upper].max(initial=-np.inf), grad[at_lower].min(initial=np.inf)]
        nu = float(np.mean([e for e in ends if np.isfinite(e)]))
    slack = np.where(at_lower, lam - lower, 0.0) + np.where(at_upper, upper - lam, 0.0)
    multipliers = np.where(at_lower, grad - nu, 0.0) + np.where(at_upper, nu - grad, 0.0)
    return float(max(
        np.abs(grad[free] - nu).max(initial=0.0),
        np.maximum(-multipliers, 0.0).max(),
        np.abs(multipliers * slack).max(),
        abs(lam.sum() - 1.0),
        np.maximum(lower - lam, 0.0).max(),
        np.maximum(lam - upper, 0.0).max(),
    ))


def degenerate_updates(n, rng):
    """Updates that make the QP degenerate: ties, a zero update, collinear and repeated ones."""
    base = rng.integers(-3, 4, size=(n, 6)).astype(float)
    u = base[0]
    yield "ties", np.eye(n, 6 if n <= 6 else n)  # orthonormal: every weight the same
    yield "zero update", np.vstack([np.zeros(6), base[1:]])
    yield "collinear", np.array([(k % 3 - 1 or 2) * u for k in range(n)])
    yield "duplicated", base[np.arange(n) % ((n + 1) // 2)]
    yield "random integers", base


def qp_instances(sizes, epsilons, seed):
    """(name, gram, epsilon, lambda0): random and degenerate updates, uniform and random lambda0."""
    rng = np.random.default_rng(seed)
    for n in sizes:
        random_updates = random_gram(n, max(n + 2, 8), rng)[1]
        for name, g in [("random", random_updates), *degenerate_updates(n, rng)]:
            for epsilon in epsilons:
                label = f"{name} n={n} eps={epsilon}"
                yield label, g @ g.T, epsilon, np.full(n, 1.0 / n)
                yield f"{label} random lambda0", g @ g.T, epsilon, rng.dirichlet(np.ones(n))


def package_instances():
    """The Gram matrices the package's own QP rules (FedMGDA+, FedMGDA, MGDA-Prox) hand the QP in a
    short toy run, with their epsilon and lambda0."""
    seen = []
    original = fedmgda.algorithms.qp.min_norm_weights

    def recording(gram, epsilon=1.0, lambda0=None):
        seen.append((np.array(gram), epsilon, None if lambda0 is None else np.array(lambda0)))
        return original(gram, epsilon, lambda0)

    hparams = {"fedmgda_plus": {"epsilon": 0.1, "eta": 1.0}, "fedmgda": {},
               "mgda_prox": {"eta": 1.0}}
    data = make_toy_federated()
    fedmgda.algorithms.qp.min_norm_weights = recording
    try:
        for name, hp in hparams.items():
            run(toy_config(algorithm=name, hparams=hp, rounds=3, participation=0.75), data=data,
                model_name="logreg")
    finally:
        fedmgda.algorithms.qp.min_norm_weights = original
    return seen


def check_exact(name, gram, epsilon, lambda0, exact):
    """The package's weights: feasible, a KKT point to 1e-12, no worse than cvxopt's answer, and
    the exact minimiser to 1e-14 (the minimiser's direction where the weights are not unique)."""
    n = len(gram)
    lam = min_norm_weights(gram, epsilon, lambda0)
    lower, upper = box_bounds(lambda0, epsilon)
    assert kkt_residual(gram, lam, lower, upper) <= 1e-12, name
    scale = max(np.diag(gram).max(), np.finfo(float).tiny)
    if n > 2:
        quadratic = 0.5 * (gram + gram.T) / scale
        cvxopt_answer = interior_point_weights(quadratic, lower, upper)
        rounding = 4 * n * np.finfo(float).eps  # of evaluating lam^T Q lam, |Q_ij| <= 1
        assert lam @ quadratic @ lam <= cvxopt_answer @ quadratic @ cvxopt_answer + rounding, name
    weight_error, direction_error = exact_distance(gram, lam, exact)
    assert direction_error <= 1e-14, name
    if np.linalg.matrix_rank(gram) == n:  # strictly convex: the weights themselves are unique
        assert weight_error <= 1e-14, name
    return lam


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
def test_weights_are_the_exact_minimiser_for_small_n(n):
    """Every choice of bounds enumerated in rational arithmetic gives the exact minimiser."""
    epsilons = [0.05, 0.1, 0.5, 1.0] if n <= 4 else [0.1, 1.0]
    for name, gram, epsilon, lambda0 in qp_instances([n], epsilons, seed=n):
        lower, upper = box_bounds(lambda0, epsilon)
        exact = enumerated_minimiser(gram, lower, upper)
        check_exact(name, gram, epsilon, lambda0, exact)


def test_weights_are_the_exact_minimiser_on_the_package_instances():
    """The Gram matrices of a toy run of each QP rule, against the enumerated exact minimiser; and
    cvxopt's answer without the finishing step is not within 1e-14 of it (so a missing finishing
    step fails this test)."""
    instances = package_instances()
    assert len(instances) >= 9 and {len(g) for g, _, _ in instances} == {6}
    cvxopt_errors = []
    for k, (gram, epsilon, lambda0) in enumerate(instances):
        lambda0 = np.full(len(gram), 1 / len(gram)) if lambda0 is None else lambda0
        lower, upper = box_bounds(lambda0, epsilon)
        exact = enumerated_minimiser(gram, lower, upper)
        check_exact(f"QP {k} of the toy runs", gram, epsilon, lambda0, exact)
        quadratic = 0.5 * (gram + gram.T) / np.diag(gram).max()
        cvxopt_answer = interior_point_weights(quadratic, lower, upper)
        cvxopt_errors.append(exact_distance(gram, cvxopt_answer, exact)[0])
    assert max(cvxopt_errors) > 1e-14


@pytest.mark.parametrize("n", [10, 100])
@pytest.mark.parametrize("epsilon", [0.05, 0.1, 0.5, 1.0])
def test_weights_are_the_certified_exact_minimiser_for_large_n(n, epsilon):
    """Too many bound choices to enumerate: the exact KKT point on the bounds the weights sit on,
    verified in rational arithmetic (which proves it the minimiser), and the KKT residual and the
    cvxopt comparison on degenerate instances, whose weights are not unique."""
    rng = np.random.default_rng(n + int(100 * epsilon))
    for lambda0 in (np.full(n, 1.0 / n), rng.dirichlet(np.ones(n))):
        g = rng.integers(-4, 5, size=(n, n + 5)).astype(float)  # integer Gram: fast rationals
        gram = g @ g.T
        lam = min_norm_weights(gram, epsilon, lambda0)
        exact = certified_minimiser(gram, *box_bounds(lambda0, epsilon), lam)
        assert exact is not None, "the weights' bounds carry no exact KKT point"
        check_exact(f"integer updates n={n}", gram, epsilon, lambda0, exact)
    for name, g in degenerate_updates(n, rng):
        gram = g @ g.T
        lam = min_norm_weights(gram, epsilon)
        lower, upper = box_bounds(np.full(n, 1.0 / n), epsilon)
        assert kkt_residual(gram, lam, lower, upper) <= 1e-12, name
        quadratic = 0.5 * (gram + gram.T) / max(np.diag(gram).max(), np.finfo(float).tiny)
        cvxopt_answer = interior_point_weights(quadratic, lower, upper)
        rounding = 4 * n * np.finfo(float).eps
        assert lam @ quadratic @ lam <= cvxopt_answer @ quadratic @ cvxopt_answer + rounding, name


def test_the_finishing_step_frees_and_fixes_weights_until_the_kkt_point():
    """From a start with a free weight near its bound, the active-set loop frees it; from the
    centre of a box that cuts off the simplex's minimiser, it fixes the weight that lands past its
    bound. Both end at the exact minimiser."""
    g = np.diag([1.0, 1.0, 2.0])
    gram = g @ g.T
    quadratic = gram / 4.0
    lower, upper = box_bounds(np.full(3, 1 / 3), 1.0)
    start = np.array([1e-8, 0.5, 0.5 - 1e-8])  # weight 0 looks at its bound, and is not
    exact = enumerated_minimiser(gram, lower, upper)  # (4/9, 4/9, 1/9): no weight on a bound
    lam = active_set_weights(quadratic, start, lower, upper)
    assert exact_distance(gram, lam, exact)[0] <= 1e-15
    lower, upper = box_bounds(np.full(3, 1 / 3), 0.05)
    exact = enumerated_minimiser(gram, lower, upper)  # weight 2 on its lower bound
    assert exact[2] == Fraction(lower[2])
    lam = active_set_weights(quadratic, np.full(3, 1 / 3), lower, upper)
    assert exact_distance(gram, lam, exact)[0] <= 1e-15
    assert kkt_residual(gram, lam, lower, upper) <= 1e-15
