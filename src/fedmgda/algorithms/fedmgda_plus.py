"""FedMGDA+, the paper's algorithm (FedMGDA+ paper Algorithm 1, eq. (25);
docs/protocol.md §4.3-4.5):

    d_i = u_i / ||u_i||
    lambda = argmin ||sum_i lambda_i d_i||^2  over the simplex within epsilon of lambda0
    w <- w + eta_t sum_i lambda_i d_i,    eta_t = eta * beta^floor(t/100)

(the code's ``--normalize=1 --epsilon=1 --global_lr=eta --global_lr_decay=beta``,
``main/federated_main.py:L185-206``, QP ``main/utils.py:L146-172``). epsilon = 1, as in every
released script, is part of the definition (``implied``).
"""

from __future__ import annotations

from fedmgda.algorithms.averaging import EPSILON, STEP_HPARAMS, WeightedUpdates


class FedMGDAPlus(WeightedUpdates):
    """min-norm QP weights of the normalised updates, server step eta_t"""

    name = "fedmgda_plus"
    display = "FedMGDA+"
    hparams = {**STEP_HPARAMS, "epsilon": EPSILON}
    implied = ("epsilon",)
    normalised_updates = True
    min_norm_qp = True
