"""FedAvg-n: FedAvg on normalised updates with a server step (docs/protocol.md §4.2, §4.5):

    w <- w + eta_t (1/n) sum_i u_i / ||u_i||,    eta_t = eta * beta^floor(t/100)

(the code's ``--normalize=1 --epsilon=0 --global_lr=eta --global_lr_decay=beta``,
``main/federated_main.py:L185-206``; the decay as the paper writes it, §4.4).
"""

from __future__ import annotations

from fedmgda.algorithms.averaging import STEP_HPARAMS, WeightedUpdates


class FedAvgN(WeightedUpdates):
    """mean of the normalised updates, server step eta_t"""

    name = "fedavg_n"
    display = "FedAvg-n"
    hparams = STEP_HPARAMS
    normalised_updates = True
