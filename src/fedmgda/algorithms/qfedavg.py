"""q-FedAvg (Li et al. 2020, q-FFL paper Algorithm 2, with L in place of 1/lr), as the FedMGDA+
code runs it (docs/protocol.md §4.5, §8.8; ``main/federated_main.py:L207-230``; fair_flearn
``flearn/trainers/qffedavg.py``):

    Delta_i = F_i^q L u_i,    h_i = q F_i^(q-1) ||L u_i||^2 + L F_i^q,
    w <- w + sum_i Delta_i / sum_i h_i

with F_i the participant's pre-round loss (§3.9) and norms over the whole model. No server step
or decay, no 1e-10 added to F_i (fair_flearn adds it).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedmgda.algorithms.base import Algorithm, HParam


@dataclass
class QFedAvg(Algorithm):
    """q-FFL weights from the participants' pre-round losses

    It reads the reported losses F_i: a participant whose F_i is not finite is left out of the
    round (``uses_losses``). A huge finite update overflows ||L u_i||^2 in float32; h is then
    recomputed in float64 and the step is that of the float64 values (an update of 1e30 makes
    sum h_i about 1e60 and the step about 0, as the rule says)."""

    name = "qfedavg"
    display = "q-FedAvg"
    hparams = {"q": HParam(0.1, 0.0, symbol="q"), "L": HParam(1.0, 0.0, low_open=True, symbol="L")}
    needs_pre_round_losses = True
    # F_i: ``reported_loss``
    own_options = {"qffl_loss": ("batch_sum", "batch_sum_per_sample", "train_mean")}

    q: float = 0.1
    L: float = 1.0
    loss: str = own_options["qffl_loss"][0]

    @classmethod
    def build(cls, hparams, *, rounds, num_users, qffl_loss):
        return cls(**hparams, loss=qffl_loss)

    def reported_loss(self, stats, sizes):
        """F_i by the run option ``qffl_loss``: batch_sum, the sum of minibatch means as computed;
        batch_sum_per_sample, that divided by the participant's train samples; train_mean, the
        mean loss over its whole train split (``loss``), as the q-FFL code's ``loss = c.get_loss()``
        ("compute loss on the whole training data", fair_flearn qffedavg.py:L52; qffedsgd.py's
        loss of the full-split batch)."""
        if self.loss == "batch_sum_per_sample":
            return stats["total"] / stats["total"].new_tensor(sizes)
        if self.loss == "train_mean":
            return stats["loss"]
        return stats["total"]

    def aggregate(self, w, updates, ctx):
        losses = ctx.pre_round_losses.to(updates.dtype)
        deltas = self.L * updates
        h = self.q * losses ** (self.q - 1) * (deltas**2).sum(dim=1) + self.L * losses**self.q
        step = (losses**self.q) @ deltas / h.sum()
        # float32 overflow: the same in float64
        if not (h.isfinite().all() and step.isfinite().all()):
            losses, deltas = losses.double(), deltas.double()
            h = self.q * losses ** (self.q - 1) * (deltas**2).sum(dim=1) + self.L * losses**self.q
            step = ((losses**self.q) @ deltas / h.sum()).to(updates.dtype)
        return w + step, {"eta": float("nan"), "h_sum": float(h.sum())}
