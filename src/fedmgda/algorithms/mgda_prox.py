"""MGDA-Prox: FedMGDA+ with FedProx's proximal term in the clients' loss
(docs/protocol.md §3.4, §4.2, §4.5):

    client: minimise F_i(w) + mu ||w - w_t||^2  (no 1/2, ``main/update.py:L87-93``)
    server: FedMGDA+'s rule (``fedmgda.algorithms.fedmgda_plus``): d_i = u_i / ||u_i||,
            lambda = argmin ||sum_i lambda_i d_i||^2 over the simplex within epsilon of lambda0,
            w <- w + eta_t sum_i lambda_i d_i

(the code's ``--normalize=1 --epsilon=1 --prox_weight=0.1``). epsilon = 1 and mu = 0.1 are part
of the definition (``implied``); the clients' term is the ``proximal`` flag with ``mu``.
"""

from __future__ import annotations

from fedmgda.algorithms.averaging import EPSILON, STEP_HPARAMS, WeightedUpdates
from fedmgda.algorithms.base import HParam


class MGDAProx(WeightedUpdates):
    """FedMGDA+ with a proximal term in the clients' loss"""

    name = "mgda_prox"
    display = "MGDA-Prox"
    hparams = {**STEP_HPARAMS, "epsilon": EPSILON, "mu": HParam(0.1, 0.0, symbol="μ")}
    implied = ("epsilon", "mu")
    normalised_updates = True
    min_norm_qp = True
    proximal = True
