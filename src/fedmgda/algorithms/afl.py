"""Agnostic Federated Learning (Mohri et al. 2019) as in the FedMGDA+ authors' Adult code
(docs/protocol.md §4.5, §8.11; ``adult/federated_main.py:L125-127, L187-200, L343-344``):

    w <- w + gamma_w sum_i lambda_i u_i       (the current lambda, over all users)
    lambda_i <- lambda_i + gamma_lambda l_i   (the round's participants; l_i their mean local loss)
    lambda <- projection of lambda onto the simplex (``adult/utils.py:L175-199``)

starting from lambda = 1/N; the run's output is the average of all iterates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fedmgda.algorithms.base import Algorithm, HParam
from fedmgda.errors import ConfigError


@dataclass
class AFL(Algorithm):
    """lambda ascent on the losses; the output is the average iterate

    ``step_weights`` (run config ``afl_step_weights``): "lambda", the rule above (AFL's gradient
    step on sum lambda_i f_i); "uniform", the model step takes the plain mean of the updates,
    sum u_i / n, while lambda moves as above. The q-FFL paper's code runs AFL so (fair_flearn
    afl.py passes (lambda_i, gradient_i) pairs to fedbase.py's ``aggregate``, which with
    sampling 2 sets every weight to 1.0: fedbase.py:L157-159).

    It reads the participants' local losses (lambda ascent): a participant reporting a non-finite
    loss is left out of the round, its lambda unchanged (``uses_losses``).
    """

    name = "afl"
    display = "AFL"
    hparams = {"gamma_w": HParam(1.0, 0.0, low_open=True, symbol="γ_w"),
               "gamma_lambda": HParam(0.1, 0.0, symbol="γ_λ")}
    averages_iterates = True
    # the model step's weights (above) and what gamma_w is (``build``)
    own_options = {"afl_step_weights": ("lambda", "uniform"),
                   "afl_gamma_w": ("server_step", "local_lr")}

    gamma_w: float = 1.0
    gamma_lambda: float = 0.1
    num_users: int = 2
    lam: Any = None  # lambda over all users, a float64 array (None: 1/N)
    step_weights: str = own_options["afl_step_weights"][0]

    @classmethod
    def build(cls, hparams, *, rounds, num_users, afl_step_weights, afl_gamma_w):
        """With run option ``afl_gamma_w: local_lr`` gamma_w is the clients' learning rate (the
        config checks local_lr equals it) and the server adds the weighted updates with step 1,
        as the authors' example command does (docs/protocol.md §4.5, §8.11)."""
        hparams = {**hparams, "gamma_w": 1.0} if afl_gamma_w == "local_lr" else hparams
        return cls(**hparams, num_users=num_users, step_weights=afl_step_weights)

    @classmethod
    def check_run(cls, cfg: Any) -> None:
        """AFL with ``afl_gamma_w: local_lr`` reads gamma_w as the clients' learning rate (the
        server step is then 1, ``build``): local_lr must equal gamma_w."""
        if cfg.afl_gamma_w == "local_lr":
            gamma_w = cfg.hparams.get("gamma_w", 1.0)
            if not math.isclose(float(gamma_w), float(cfg.local_lr)):
                raise ConfigError("afl_gamma_w: local_lr reads AFL's gamma_w as the clients' "
                                  "learning rate, so local_lr must equal gamma_w (got local_lr "
                                  f"{cfg.local_lr}, gamma_w {gamma_w})")

    def __post_init__(self) -> None:
        if self.lam is None:
            self.load_state_dict({"lam": [1.0 / self.num_users] * self.num_users})

    def aggregate(self, w, updates, ctx):
        from fedmgda.algorithms.qp import project_to_simplex

        if self.step_weights == "uniform":
            new_w = w + self.gamma_w * updates.mean(dim=0)
        else:
            weights = updates.new_tensor(self.lam[ctx.participants])
            new_w = w + self.gamma_w * (weights @ updates)
        ascent = self.lam.copy()
        ascent[ctx.participants] += self.gamma_lambda * ctx.train_losses.double().cpu().numpy()
        self.lam = project_to_simplex(ascent)
        return new_w, {"eta": self.gamma_w, "lambda": self.lam.tolist()}

    def state_dict(self):
        return {"lam": self.lam.tolist()}

    def load_state_dict(self, state):
        import numpy as np

        self.lam = np.asarray(state["lam"], dtype=np.float64)
