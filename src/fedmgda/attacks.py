"""Attacks on any algorithm: one malicious user, forced into every round (the code's ``--vip``).

- bias (Table 7, Figure 2 left): the attacker adds a constant to the loss values it reports.
  Gradients, hence updates, are unchanged: only loss-consuming algorithms (q-FedAvg's F_i,
  AFL's lambda ascent) see it.
- scaling (Figure 2 right): the attacker multiplies its loss by a factor, so its gradients, its
  update and the losses it reports grow by that factor. Normalising algorithms cancel it when
  the client takes a single step (the update's direction is unchanged); with several momentum
  steps the trajectory changes, so they are robust but not exactly invariant. With a large factor
  (1e12 and up) the attacker's own float32 training overflows: its reported loss becomes Inf and,
  with several steps or a deeper model, its update NaN. Such a participant is left out of the
  round by the one rule for non-finite reports (``fedmgda.screening.screen_reports``); it never
  stops the run by itself.
"""

from __future__ import annotations

from fedmgda.config import AttackConfig


def loss_scale(attack: AttackConfig, user: int) -> float:
    """Factor on ``user``'s training objective (1 for everyone but a scaling attacker)."""
    return attack.value if attack.kind == "scaling" and user == attack.user else 1.0


def loss_bias(attack: AttackConfig, user: int) -> float:
    """Constant added to every loss value ``user`` reports (0 for everyone but a bias attacker)."""
    return attack.value if attack.kind == "bias" and user == attack.user else 0.0


def force_attacker(participants: list[int], attacker: int) -> list[int]:
    """The round's participants with the attacker in the last slot, as the authors' ``--vip``
    option does: if sampled it is swapped into the last slot, otherwise it replaces the last
    sampled user, so the number of participants is unchanged."""
    others = [user for user in participants if user != attacker]
    if len(others) == len(participants):
        others = others[:-1]
    return others + [attacker]
