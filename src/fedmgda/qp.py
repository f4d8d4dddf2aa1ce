"""The min-norm quadratic program at the heart of (Fed)MGDA.

    lambda* = argmin_lambda || sum_i lambda_i g_i ||^2
              s.t. lambda in the simplex, || lambda - lambda0 ||_inf <= epsilon

It is solved on the m x m Gram matrix K_ij = <g_i, g_j>: for m = 2 in closed form (the minimum of
a parabola on a segment), for m > 2 with cvxopt's interior-point QP solver. The authors' code uses
quadprog (an exact active-set method that fails on a singular Gram
matrix); cvxopt accepts a positive semi-definite K, and we polish its answer onto the feasible set,
so the difference is at the level of the solver tolerance (tests check KKT to 1e-6).
"""

from __future__ import annotations

import numpy as np
from cvxopt import matrix, solvers

_SOLVER_OPTIONS = {"show_progress": False, "abstol": 1e-11, "reltol": 1e-11, "feastol": 1e-11, "maxiters": 200}


def box_bounds(lambda0: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """The simplex intersected with the epsilon-box around lambda0, as per-coordinate bounds."""
    return np.maximum(0.0, lambda0 - epsilon), np.minimum(1.0, lambda0 + epsilon)


def min_norm_weights(gram: np.ndarray, epsilon: float = 1.0, lambda0: np.ndarray | None = None) -> np.ndarray:
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
    return interior_point_weights(quadratic, lower, upper)


def two_weights(quadratic: np.ndarray, lower: np.ndarray, upper: np.ndarray, lambda0: np.ndarray) -> np.ndarray:
    """The minimiser for two updates in closed form (docs/protocol.md §4.3): with lambda = (l, 1 - l),
    ||l u_1 + (1 - l) u_2||^2 is a parabola in l with curvature ||u_1 - u_2||^2 and its minimum at
    l* = <u_2 - u_1, u_2> / ||u_1 - u_2||^2, clipped to l's interval [lower_1, upper_1] (the box of
    lambda_2 = 1 - l is the same interval: lambda0 is on the simplex). ``quadratic`` is symmetric.
    Equal updates (no curvature, up to rounding) give the same direction for every l: lambda0."""
    curvature = quadratic[0, 0] - 2 * quadratic[0, 1] + quadratic[1, 1]
    if not curvature > 0:
        return lambda0.copy()
    first = float(np.clip((quadratic[1, 1] - quadratic[0, 1]) / curvature, lower[0], upper[0]))
    return np.array([first, 1.0 - first])


def interior_point_weights(quadratic: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """The minimiser of lambda^T Q lambda over {sum = 1, lower <= lambda <= upper} by cvxopt (any m),
    polished onto the feasible set. ``quadratic``: symmetric, scaled to a largest diagonal of 1."""
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
    """Euclidean projection onto the probability simplex (sort-based; Wang & Carreira-Perpinan 2013).

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
    if len(positive) == 0:  # rounding lost the simplex's 1 (huge entries): shift, which leaves the projection
        return project_to_simplex(v - u[0])
    rho = positive[-1]
    return np.maximum(v - cumulative[rho] / (rho + 1), 0.0)
