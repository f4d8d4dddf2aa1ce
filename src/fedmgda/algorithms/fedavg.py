"""FedAvg (McMahan et al. 2017), as the FedMGDA+ authors run it (docs/protocol.md §4.2, §4.5):

    w <- w + (1/n) sum_i u_i

over the round's n participants: server step 1, raw updates, no weighting by data size (the
code's ``--normalize=0 --epsilon=0``, ``main/federated_main.py:L185-206``; on Adult epsilon = 0
gives (0.5, 0.5), ``adult/federated_main.py:L207-208``). The run option ``aggregation_weights:
samples`` weighs by n_i / sum n instead, FedAvg as McMahan et al. define it.
"""

from __future__ import annotations

from fedmgda.algorithms.averaging import WeightedUpdates


class FedAvg(WeightedUpdates):
    """mean of the raw updates"""

    name = "fedavg"
    display = "FedAvg"
