"""A plug-in with a client side: SCAFFOLD (Karimireddy et al., 2020, "SCAFFOLD: Stochastic
Controlled Averaging for Federated Learning", ICML; Algorithm 1 with option II). Not in the paper:
it shows the client-side hooks of a plug-in (docs/plugins.md §3).

Use it with config lines (SCAFFOLD's clients run plain SGD, so the setting's momentum is 0):

    plugins: [examples/scaffold.py:Scaffold]
    settings: {mine: {..., momentum: 0}}
    grids: {mine: [{algorithm: scaffold}, {algorithm: fedmgda_plus}]}

The server keeps a control variate c, each client i its own c_i (both start at 0). In a round,
participant i starts from the global model x and takes K local steps

    y <- y - lr (g_i(y) + c - c_i)

i.e. its local objective gains the term <c - c_i, y - x>, whose gradient is c - c_i. Then
(option II) c_i+ = c_i - c + (x - y) / (K lr), and the client sends delta c_i = c_i+ - c_i beside
its update u_i = y - x. The server steps x <- x + eta_g mean_i u_i and c <- c + (|S| / N) mean_i
delta c_i (|S| participants out of N clients). With c = c_i = 0 the first round is FedAvg's.
"""

from __future__ import annotations

import torch

from fedmgda.algorithms import Algorithm, ClientRound, HParam, RoundContext
from fedmgda.errors import ConfigError


class Scaffold(Algorithm):
    """SCAFFOLD: local steps corrected by control variates, c - c_i (option II)."""

    name = "scaffold"
    display = "SCAFFOLD"
    hparams = {"eta_g": HParam(1.0, 0.0, low_open=True, symbol="η_g")}  # the server's step

    @classmethod
    def build(cls, hparams, *, rounds, num_users):
        return cls(hparams["eta_g"], num_users)

    @classmethod
    def check_run(cls, cfg):
        # option II reads (x - y) / (K lr) as the mean corrected gradient: true of plain SGD only
        if cfg.momentum != 0:
            raise ConfigError(f"scaffold: its clients run plain SGD (option II's c_i update assumes it); set momentum: 0, got {cfg.momentum}")

    def __init__(self, eta_g: float, num_users: int):
        self.eta_g, self.num_users = eta_g, num_users
        self.c: torch.Tensor | None = None  # the server's control variate; None: still 0

    def control(self, like: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(like) if self.c is None else self.c

    # ------------------------------------------------------------ the clients' side
    def client_state(self, user: int, w: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(w)  # c_i, kept by the run across rounds and in checkpoints

    def local_term(self, w: torch.Tensor, w_start: torch.Tensor, c_i: torch.Tensor) -> torch.Tensor:
        return ((self.control(w_start) - c_i) * (w - w_start)).sum()  # gradient: c - c_i

    def after_training(self, client: ClientRound):
        c_i = client.state
        c_i_new = c_i - self.control(c_i) - client.update / (client.steps * client.lr)  # x - y = -u
        return c_i_new, c_i_new - c_i  # the new state, and delta c_i sent beside the update

    # ------------------------------------------------------------ the server's side
    def aggregate(self, w: torch.Tensor, updates: torch.Tensor, ctx: RoundContext):
        delta_c = torch.stack(ctx.client_reports).mean(dim=0)
        self.c = self.control(w) + len(ctx.participants) / self.num_users * delta_c
        return w + self.eta_g * updates.mean(dim=0), {"eta": self.eta_g}

    def state_dict(self):
        return {"c": self.c}

    def load_state_dict(self, state):
        self.c = state["c"]
