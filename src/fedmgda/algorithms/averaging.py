"""The averaging rule that FedAvg, FedAvg-n, FedProx, FedMGDA, FedMGDA+ and MGDA-Prox share
(docs/protocol.md §4.3-4.5; authors' code ``main/federated_main.py:L184-206``):

    w <- w + eta_t * sum_i lambda_i u_i,    eta_t = eta * beta^floor(t/100)

with lambda = argmin ||sum lambda_i u_i||^2 over the simplex within epsilon of the a-priori weights
lambda0 (epsilon = 0: lambda0, no QP; ``fedmgda.algorithms.qp``), u_i the returned updates, each
divided by its full-model L2 norm when the algorithm declares ``normalised_updates``. Each of the
six is a subclass in its own module that declares its facts (name, hyper-parameters, flags).

The modules of this package import numpy, torch and the QP solver inside the methods that
compute: the catalog reads the classes while the Snakefile parses (``fedmgda.catalog``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedmgda.algorithms.base import Algorithm, HParam

# the server step of the normalising rules: eta_t = eta * beta^floor(t/100)
STEP_HPARAMS = {
    "eta": HParam(1.0, 0.0, low_open=True, symbol="η"),
    # the paper's total decay over the run; 0 (or 1) = none
    "decay": HParam(0.0, 0.0, 1.0, symbol="decay"),
    # the code's per-100-round factor; overrides decay
    "beta": HParam(None, 0.0, 1.0, low_open=True, symbol="β"),
}
# half-width of the QP's box around lambda0 (1: the simplex)
EPSILON = HParam(1.0, 0.0, 1.0, symbol="ε")


def decay_per_100_rounds(decay: float | None, beta: float | None, rounds: int) -> float:
    """The per-100-round factor beta of eta_t = eta * beta^floor(t/100) (docs/protocol.md §4.4).

    ``decay`` is the paper's notation: the total shrink factor over ``rounds`` rounds
    (beta = decay^(100/T)); 0 and 1 both mean no decay. ``beta`` gives the code's flag directly.
    """
    if beta is not None:
        return beta
    if decay is None or decay in (0.0, 1.0):
        return 1.0
    return float(decay ** (100.0 / rounds))


@dataclass
class WeightedUpdates(Algorithm):
    """The rule w + eta_t * sum_i lambda_i u_i of the six averaging algorithms (a base, not one).

    ``aggregation_weights`` (run config) is lambda0, the a-priori weights at the centre of the
    epsilon-box: "uniform" 1/n, or "samples" n_i / sum n. FedMGDA+ paper §3: "setting epsilon = 0
    recovers FedAvg with a priori weighting lambda0" (eq. 25), and FedAvg's weights are "typically
    ... the dataset size at each user, ..., or simply uniform" (§2); epsilon = 0 with "samples" is
    FedAvg as McMahan et al. define it (fair_flearn fedbase.py:L152-167, ``aggregate`` with
    sampling 1). With epsilon >= 1 the box is the whole simplex and lambda0 does not matter.

    Extreme updates: the normalising rules (FedAvg-n, FedMGDA+, MGDA-Prox) use overflow-proof
    norms (``normalise_rows``): a finite update gives its own direction whatever its magnitude, so
    a scaling attacker of any factor weighs as an honest user; the QP's Gram matrix is finite
    (``gram_matrix``). The raw rules (FedAvg, FedProx, FedMGDA) add the raw updates: a huge finite
    update moves the model by as much (FedMGDA's QP gives it a small weight). These rules read no
    losses (``uses_losses`` False): a participant is left out only for a non-finite update.
    """

    uses_losses: ClassVar[bool] = False
    # lambda0
    own_options: ClassVar[dict[str, tuple[str, ...]]] = {
        "aggregation_weights": ("uniform", "samples")}
    epsilon: float = 0.0
    eta: float = 1.0
    beta: float = 1.0
    aggregation_weights: str = own_options["aggregation_weights"][0]

    @classmethod
    def build(cls, hparams, *, rounds, num_users, aggregation_weights):
        return cls(epsilon=hparams.get("epsilon") or 0.0, eta=hparams.get("eta") or 1.0,
                   beta=decay_per_100_rounds(hparams.get("decay"), hparams.get("beta"), rounds),
                   aggregation_weights=aggregation_weights)

    def step_size(self, t: int) -> float:
        return self.eta * self.beta ** (t // 100)

    def prior_weights(self, ctx):
        """lambda0 of the round: uniform 1/n, or the participants' train sizes n_i / sum n."""
        import numpy as np

        if self.aggregation_weights == "samples":
            sizes = np.asarray(ctx.train_sizes, dtype=np.float64)
            return sizes / sizes.sum()
        n = len(ctx.participants)
        return np.full(n, 1.0 / n)

    def aggregate(self, w, updates, ctx):
        from fedmgda.algorithms.linalg import gram_matrix, normalise_rows
        from fedmgda.algorithms.qp import min_norm_weights

        directions = normalise_rows(updates) if self.normalised_updates else updates
        lambda0 = self.prior_weights(ctx)
        if self.epsilon > 0:
            gram = gram_matrix(directions)
            weights = min_norm_weights(gram, self.epsilon, lambda0)
        else:
            weights = lambda0
        lam = directions.new_tensor(weights)  # float64 weights in the directions' dtype and device
        eta_t = self.step_size(ctx.round)
        return w + eta_t * (lam @ directions), {"eta": eta_t, "lambda": weights.tolist()}
