"""The min-norm quadratic program at the heart of (Fed)MGDA.

    lambda* = argmin_lambda || sum_i lambda_i g_i ||^2
              s.t. lambda in the simplex, || lambda - lambda0 ||_inf <= epsilon

It is solved on the m x m Gram matrix K_ij = <g_i, g_j>: for m = 2 in closed form (the minimum of
a parabola on a segment), for m > 2 with cvxopt's interior-point QP solver, whose answer is then
finished on its active set: the weights at a bound are fixed there and the others solved from the
KKT equalities, freeing a fixed weight whose multiplier has the wrong sign (docs/protocol.md §4.3).
The authors' code uses quadprog, an exact active-set method that fails on a singular Gram matrix;
cvxopt accepts a positive semi-definite K, and the finishing step solves its free block by least
squares, so a singular K is fine too. The weights agree with an exact rational solution to
rounding (tests check 1e-14 and the KKT conditions to 1e-12), as quadprog's do.
"""

from __future__ import annotations

import numpy as np
from cvxopt import matrix, solvers

_SOLVER_OPTIONS = {"show_progress": False, "abstol": 1e-11, "reltol": 1e-11, "feastol": 1e-11,
                   "maxiters": 200}
# cvxopt stops inside the box: a weight this close to a bound is taken to be on it (the active-set
# loop frees it again when its multiplier says so)
_BOUND_TOLERANCE = 1e-7
_FEASIBILITY_TOLERANCE = 1e-12  # a solved weight this far past a bound is clipped onto it
_SIGN_TOLERANCE = 1e-13  # a multiplier this far below zero is rounding (K scaled to diagonal <= 1)


def box_bounds(lambda0: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """The simplex intersected with the epsilon-box around lambda0, as per-coordinate bounds."""
    return np.maximum(0.0, lambda0 - epsilon), np.minimum(1.0, lambda0 + epsilon)


def min_norm_weights(gram: np.ndarray, epsilon: float = 1.0,
                     lambda0: np.ndarray | None = None) -> np.ndarray:
    """Weights lambda minimising lambda^T K lambda over the simplex within epsilon of lambda0.

    gram:    m x m Gram matrix of the (normalised or raw) updates.
    epsilon: half-width of the box around lambda0; 0 returns lambda0 itself (no QP, as in the
             authors' code), epsilon >= 1 leaves the plain simplex (vanilla MGDA).
    lambda0: centre of the box; uniform 1/m by default (uniform over the round's participants).
    """
    gram = np.asarray(gram, dtype=np.float64)
    m = gram.shape[0]
    if gram.shape != (m, m):
        raise ValueError(f"gram must be square, got shape {gram.shape}")
    lambda0 = np.full(m, 1.0 / m) if lambda0 is None else np.asarray(lambda0, dtype=np.float64)
    if lambda0.shape != (m,) or abs(lambda0.sum() - 1.0) > 1e-9 or (lambda0 < 0).any():
        raise ValueError("lambda0 must be a point of the simplex with one weight per update")
    if not 0.0 <= epsilon:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if epsilon == 0.0 or m == 1:
        return lambda0.copy()
    if not np.isfinite(gram).all():
        raise FloatingPointError("the Gram matrix has non-finite entries (diverged updates)")

    lower, upper = box_bounds(lambda0, epsilon)
    scale = np.max(np.diag(gram))
    if scale <= 0.0:  # every update is zero: any weighting gives the same (zero) direction
        return lambda0.copy()
    quadratic = 0.5 * (gram + gram.T) / scale  # symmetrised and scaled: the minimiser is unchanged
    if m == 2:
        return two_weights(quadratic, lower, upper, lambda0)
    start = interior_point_weights(quadratic, lower, upper)
    return active_set_weights(quadratic, start, lower, upper)


def two_weights(quadratic: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                lambda0: np.ndarray) -> np.ndarray:
    """The minimiser for two updates in closed form (docs/protocol.md §4.3): with
    lambda = (l, 1 - l), ||l u_1 + (1 - l) u_2||^2 is a parabola in l with curvature
    ||u_1 - u_2||^2 and its minimum at l* = <u_2 - u_1, u_2> / ||u_1 - u_2||^2, clipped to l's
    interval [lower_1, upper_1] (the box of
    lambda_2 = 1 - l is the same interval: lambda0 is on the simplex). ``quadratic`` is symmetric.
    Equal updates (no curvature, up to rounding) give the same direction for every l: lambda0."""
    curvature = quadratic[0, 0] - 2 * quadratic[0, 1] + quadratic[1, 1]
    if not curvature > 0:
        return lambda0.copy()
    first = float(np.clip((quadratic[1, 1] - quadratic[0, 1]) / curvature, lower[0], upper[0]))
    return np.array([first, 1.0 - first])


def interior_point_weights(quadratic: np.ndarray, lower: np.ndarray,
                           upper: np.ndarray) -> np.ndarray:
    """The minimiser of lambda^T Q lambda over {sum = 1, lower <= lambda <= upper} by cvxopt (any
    m), polished onto the feasible set. ``quadratic``: symmetric, scaled to a largest diagonal of
    1."""
    m = len(quadratic)
    identity = np.eye(m)
    solution = solvers.qp(
        matrix(quadratic),
        matrix(np.zeros(m)),
        matrix(np.vstack([-identity, identity])),
        matrix(np.concatenate([-lower, upper])),
        matrix(np.ones((1, m))),
        matrix(np.ones(1)),
        options=_SOLVER_OPTIONS,
    )
    return project_to_box_simplex(np.array(solution["x"]).ravel(), lower, upper)


def active_set_weights(
    quadratic: np.ndarray, start: np.ndarray, lower: np.ndarray, upper: np.ndarray
) -> np.ndarray:
    """The exact minimiser of lambda^T Q lambda over {sum = 1, lower <= lambda <= upper}, found from
    a feasible approximate one, ``start`` (cvxopt's): its weights within _BOUND_TOLERANCE of a bound
    are fixed there, the free ones solved from the KKT equalities (:func:`free_block_weights`).
    While that is not a KKT point, a free weight that lands past a bound is fixed there, or else
    the fixed weight whose multiplier has the wrong sign the most is freed, and the block solved
    again. A KKT point of this convex problem is a minimiser; it is returned when it is also no
    worse in the objective than ``start`` (up to its rounding), and ``start`` otherwise.
    ``quadratic``: symmetric, scaled to a largest diagonal of 1."""
    m = len(start)
    at_lower = start - lower <= _BOUND_TOLERANCE
    at_upper = ~at_lower & (upper - start <= _BOUND_TOLERANCE)
    for _ in range(2 * m + 2):  # each step fixes or frees one weight; bounded, cvxopt's otherwise
        free = ~(at_lower | at_upper)
        weights = free_block_weights(quadratic, free, np.where(at_lower, lower, upper))
        if weights is None:
            break
        past = np.where(free, np.maximum(lower - weights, weights - upper), -np.inf)
        worst = int(np.argmax(past))
        if past[worst] > _FEASIBILITY_TOLERANCE:
            (at_lower if weights[worst] < lower[worst] else at_upper)[worst] = True
            continue
        weights = np.clip(weights, lower, upper)
        if free.any():  # the rounding of the sum goes to the free weights, the fixed stay exact
            weights[free] += (1.0 - weights.sum()) / free.sum()
        wrong_sign = multiplier_violations(quadratic @ weights, free, at_lower, at_upper)
        worst = int(np.argmax(wrong_sign))
        if wrong_sign[worst] > _SIGN_TOLERANCE:
            at_lower[worst] = at_upper[worst] = False
            continue
        rounding = 4 * m * np.finfo(np.float64).eps  # of lambda^T Q lambda, |Q_ij| <= 1
        if weights @ quadratic @ weights <= start @ quadratic @ start + rounding:
            return weights
        break
    return start


def free_block_weights(
    quadratic: np.ndarray, free: np.ndarray, fixed_values: np.ndarray
) -> np.ndarray | None:
    """The weights with those outside ``free`` at ``fixed_values`` and the free ones solving the
    KKT equalities Q_FF lambda_F + Q_FB lambda_B = nu 1, sum lambda = 1 (for lambda_F and nu, by
    least squares: Q_FF is singular for collinear or repeated updates). None when nothing is free
    and the fixed weights do not sum to 1."""
    weights = np.where(free, 0.0, fixed_values)
    remainder = 1.0 - weights.sum()
    k = int(free.sum())
    if k == 0:
        return weights if abs(remainder) <= _FEASIBILITY_TOLERANCE else None
    system = np.zeros((k + 1, k + 1))
    system[:k, :k] = quadratic[np.ix_(free, free)]
    system[:k, k] = -1.0
    system[k, :k] = 1.0
    rhs = np.append(-quadratic[np.ix_(free, ~free)] @ weights[~free], remainder)
    weights[free] = np.linalg.lstsq(system, rhs, rcond=None)[0][:k]
    return weights


def multiplier_violations(
    gradient: np.ndarray, free: np.ndarray, at_lower: np.ndarray, at_upper: np.ndarray
) -> np.ndarray:
    """How far each fixed weight's bound multiplier is below zero (0 for the free weights), for the
    gradient Q lambda: a weight at its lower bound needs gradient_i >= nu, one at its upper bound
    gradient_i <= nu, nu the multiplier of sum = 1 (the free weights' common gradient, or the
    middle of the interval the fixed ones leave for it when none is free)."""
    if free.any():
        nu = float(np.mean(gradient[free]))
    else:
        highest_upper = gradient[at_upper].max(initial=-np.inf)
        lowest_lower = gradient[at_lower].min(initial=np.inf)
        ends = [end for end in (highest_upper, lowest_lower) if np.isfinite(end)]
        nu = float(np.mean(ends))
    return np.where(at_lower, nu - gradient, 0.0) + np.where(at_upper, gradient - nu, 0.0)


def project_to_box_simplex(weights: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Euclidean projection onto {sum = 1, lower <= w <= upper}, by bisection on the shift.

    Used to remove the interior-point solver's tiny infeasibilities, so that the returned weights
    are exactly feasible.
    """

    def total(shift: float) -> float:
        return float(np.clip(weights - shift, lower, upper).sum())

    lo, hi = float(np.min(weights - upper)), float(np.max(weights - lower))
    for _ in range(200):
        if hi - lo <= 1e-15:  # converged to float precision (about 50 halvings)
            break
        mid = 0.5 * (lo + hi)
        if total(mid) > 1.0:
            lo = mid
        else:
            hi = mid
    projected = np.clip(weights - 0.5 * (lo + hi), lower, upper)
    return projected / projected.sum()


def project_to_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex (sort-based; Wang & Carreira-Perpinan
    2013).

    AFL's lambda ascent step projects with this, as the authors' Adult code does. ``v`` must be
    finite. When its entries are so large that the sums lose the 1 of the simplex (a loss of 1e20
    in the ascent), the projection is taken of v - max(v), the same point in exact arithmetic.
    """
    v = np.asarray(v, dtype=np.float64)
    if not np.isfinite(v).all():
        raise FloatingPointError("project_to_simplex needs finite values")
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - 1.0
    ks = np.arange(1, len(v) + 1)
    positive = np.nonzero(u - cumulative / ks > 0)[0]
    # rounding lost the simplex's 1 (huge entries): shift, which leaves the projection
    if len(positive) == 0:
        return project_to_simplex(v - u[0])
    rho = positive[-1]
    return np.maximum(v - cumulative[rho] / (rho + 1), 0.0)
