"""FedMGDA (vanilla): the min-norm point of the convex hull of the raw updates
(docs/protocol.md §4.3, §4.5, §8.15; FedMGDA+ paper §6.2.1, eq. (25)):

    lambda = argmin ||sum_i lambda_i u_i||^2  over the simplex within epsilon of lambda0
    w <- w + sum_i lambda_i u_i

(the code's ``--normalize=0 --epsilon=1``, server step 1, no decay;
``main/federated_main.py:L185-206``, QP ``main/utils.py:L146-172``). epsilon = 1, the whole
simplex, is part of the definition (``implied``).
"""

from __future__ import annotations

from fedmgda.algorithms.averaging import EPSILON, WeightedUpdates


class FedMGDA(WeightedUpdates):
    """min-norm QP weights of the raw updates"""

    name = "fedmgda"
    display = "FedMGDA"
    hparams = {"epsilon": EPSILON}
    implied = ("epsilon",)
    min_norm_qp = True
