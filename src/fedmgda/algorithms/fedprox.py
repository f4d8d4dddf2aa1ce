"""FedProx (Li et al. 2020) as the FedMGDA+ authors run it (docs/protocol.md §3.4, §4.5):

    client: minimise F_i(w) + mu ||w - w_t||^2  (no 1/2, as ``main/update.py:L87-93``)
    server: w <- w + (1/n) sum_i u_i

the code's ``--prox_weight=mu`` with FedAvg's server rule (raw updates, step 1). The clients'
term is the ``proximal`` flag with hyper-parameter ``mu``: defined once
(``fedmgda.client.ProximalTerm``), every training path adds it. FedProx's own paper writes
(mu/2) (§8.5).
"""

from __future__ import annotations

from fedmgda.algorithms.averaging import WeightedUpdates
from fedmgda.algorithms.base import HParam


class FedProx(WeightedUpdates):
    """FedAvg with a proximal term in the clients' loss"""

    name = "fedprox"
    display = "FedProx"
    hparams = {"mu": HParam(0.01, 0.0, symbol="μ")}
    proximal = True
