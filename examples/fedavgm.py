"""A plug-in algorithm: FedAvg with server momentum (FedAvgM; Hsu, Qi and Brown, 2019,
"Measuring the effects of non-identical data distribution", arXiv:1909.06335). Not in the paper:
it shows how a new algorithm is put beside FedMGDA+ (docs/plugins.md).

Use it with two config lines:

    plugins: [examples/fedavgm.py:FedAvgM]
    grids: {mine: [{algorithm: fedavgm, hparams: {beta: 0.9}}, {algorithm: fedmgda_plus}]}
"""

from __future__ import annotations

import torch

from fedmgda.algorithms import Algorithm, HParam, RoundContext


class FedAvgM(Algorithm):
    """FedAvg with server momentum: v <- beta v + mean_i u_i, w <- w + eta v."""

    name = "fedavgm"  # as written in grids and run paths
    display = "FedAvgM"  # as shown in tables and figures
    hparams = {  # defaults and ranges, checked before any job starts
        "eta": HParam(1.0, 0.0, low_open=True, symbol="η"),
        "beta": HParam(0.9, 0.0, 1.0, symbol="β"),
    }
    # Nothing else to declare: the clients train as for FedAvg (no proximal term), the rule needs no
    # pre-round losses, and the run's output is the last iterate.
    # It reads no reported losses, so a participant is left out of a round only when its update is
    # not finite (a loss-reading rule keeps the default True: a non-finite loss leaves it out too).
    uses_losses = False

    def __init__(self, eta: float, beta: float):
        self.eta, self.beta = eta, beta
        self.velocity: torch.Tensor | None = None

    def aggregate(self, w: torch.Tensor, updates: torch.Tensor, ctx: RoundContext):
        mean = updates.mean(dim=0)  # rows of updates: u_i = w_i - w of the round's participants
        self.velocity = mean if self.velocity is None else self.beta * self.velocity + mean
        return w + self.eta * self.velocity, {"eta": self.eta}

    # the server's state goes into the run's checkpoints, so that a killed run resumes exactly
    def state_dict(self):
        return {"velocity": self.velocity}

    def load_state_dict(self, state):
        self.velocity = state["velocity"]
