"""A plug-in with a client side: FedDyn (Acar, Zhao, Matas, Mattina, Whatmough and Saligrama,
2021, "Federated Learning Based on Dynamic Regularization", ICLR; Algorithm 1). Not in the paper:
a second worked example of the client-side hooks (docs/plugins.md §3), beside SCAFFOLD.

Use it with config lines:

    plugins: [examples/feddyn.py:FedDyn]
    grids: {mine: [{algorithm: feddyn, hparams: {alpha: 0.01}}, {algorithm: fedmgda_plus}]}

Client k keeps g_k, the gradient of its loss at its previous local model (0 before its first
round). In round t, starting from the server's model w_start = theta^{t-1}, it minimises

    L_k(theta) - <g_k, theta - w_start> + alpha/2 ||theta - w_start||^2

(Algorithm 1 writes <g_k, theta>; the constant <g_k, w_start> changes the reported loss only, not
the gradient), then, by the first-order condition of that minimum, g_k <- g_k - alpha u_k with
u_k = theta_k - w_start. The server keeps h (0 at first):

    h <- h - alpha / m * sum_{k in P_t} u_k,    theta^t = mean_{k in P_t} theta_k - h / alpha

(m clients in all, P_t the round's participants). The term is a pure function of (w, w_start,
g_k), so the engine trains FedDyn's clients on the batched path, their g_k stacked.
"""

from __future__ import annotations

import torch

from fedmgda.algorithms import Algorithm, ClientRound, HParam, RoundContext


class FedDyn(Algorithm):
    """FedDyn: each client's objective is corrected by its dynamic regulariser (Algorithm 1)."""

    name = "feddyn"
    display = "FedDyn"
    hparams = {"alpha": HParam(0.01, 0.0, low_open=True, symbol="α")}

    @classmethod
    def build(cls, hparams, *, rounds, num_users):
        return cls(hparams["alpha"], num_users)

    def __init__(self, alpha: float, num_users: int):
        self.alpha, self.num_users = alpha, num_users
        self.h: torch.Tensor | None = None  # the server's state; None: still 0

    # ------------------------------------------------------------ the clients' side
    def client_state(self, user: int, w: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(w)  # g_k

    def local_term(self, w: torch.Tensor, w_start: torch.Tensor, g_k: torch.Tensor) -> torch.Tensor:
        move = w - w_start
        return self.alpha / 2 * (move * move).sum() - (g_k * move).sum()

    def after_training(self, client: ClientRound):
        return client.state - self.alpha * client.update, None  # the new g_k; nothing sent

    # ------------------------------------------------------------ the server's side
    def aggregate(self, w: torch.Tensor, updates: torch.Tensor, ctx: RoundContext):
        h = torch.zeros_like(w) if self.h is None else self.h
        self.h = h - self.alpha / self.num_users * updates.sum(dim=0)
        return w + updates.mean(dim=0) - self.h / self.alpha, {"eta": 1.0}

    def state_dict(self):
        return {"h": self.h}

    def load_state_dict(self, state):
        self.h = state["h"]
