"""The one rule for a round's non-finite reports, the same for every algorithm
(docs/protocol-choices.md, "Non-finite reports"): which participants the aggregation uses
(``screen_reports``), the round's metrics.csv columns of what was left out (``Screened.columns``)
and the round's reported training loss over the finite losses (``finite_mean``). The round
itself: ``fedmgda.simulator.Simulation.round``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Screened:
    """A round's participants sorted by what they reported (``screen_reports``)."""

    users: list[int]  # the round's participants
    kept: list[int]  # positions (into ``users``) of those the aggregation uses
    bad_updates: list[int]  # users whose update has a NaN or Inf entry
    bad_losses: list[int]  # users who reported a non-finite loss

    def columns(self) -> dict[str, Any]:
        """The round's metrics.csv columns: how many updates and losses were not finite, whose
        (space-separated user ids, "" when none), and how many participants were left out."""
        flagged = sorted(set(self.bad_updates) | set(self.bad_losses))
        return {"nonfinite_updates": len(self.bad_updates),
                "nonfinite_losses": len(self.bad_losses),
                "nonfinite_users": " ".join(map(str, flagged)),
                "dropped": len(self.users) - len(self.kept)}


def screen_reports(users: list[int], updates: torch.Tensor, losses: list[torch.Tensor],
                   uses_losses: bool) -> Screened:
    """The one rule for non-finite reports, the same for every algorithm
    (docs/protocol-choices.md): a participant is left out of the round's aggregation when its
    update has a NaN or Inf entry,
    or when one of its reported ``losses`` (one tensor per kind of loss, a value per participant)
    is not finite and the algorithm reads losses (``uses_losses``). Nothing is replaced by zeros."""
    update_ok = torch.isfinite(updates).all(dim=1).tolist()
    loss_ok = torch.isfinite(torch.stack(losses)).all(dim=0).tolist()
    kept = [i for i in range(len(users)) if update_ok[i] and (loss_ok[i] or not uses_losses)]
    return Screened(list(users), kept, [u for u, ok in zip(users, update_ok) if not ok],
                    [u for u, ok in zip(users, loss_ok) if not ok])


def finite_mean(values: torch.Tensor) -> float:
    """The mean of the finite values (NaN when none is): the round's reported training loss leaves
    out a participant whose loss is not finite (counted in ``nonfinite_losses``)."""
    finite = torch.isfinite(values)
    return float(values.mean() if bool(finite.all()) else values[finite].mean())
