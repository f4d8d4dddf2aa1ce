"""Small plug-ins with a local term, for the tests of the batched path's terms
(tests/test_plugin_terms.py): one that is FedProx written as a term, and ones whose term or state
cannot be vmap-ed."""

from __future__ import annotations

import torch

from fedmgda.algorithms import Algorithm, HParam


class ProxTerm(Algorithm):
    """FedProx with its proximal term written as a plug-in's local term (stateless)."""

    name = "prox_term"
    hparams = {"mu": HParam(0.01, 0.0)}

    def __init__(self, mu: float):
        self.mu = mu

    def local_term(self, w, w_start, state):
        return self.mu * ((w - w_start) ** 2).sum()

    def aggregate(self, w, updates, ctx):
        return w + updates.mean(dim=0), {"eta": 1.0}


class ProxTermOnReference(ProxTerm):
    """The same, declared not vmap-able."""

    name = "prox_term_ref"
    vmap_local_term = False


class ItemTerm(ProxTerm):
    """A term that reads a tensor's value with ``.item()``: it cannot be vmap-ed."""

    name = "item_term"

    def client_state(self, user, w):
        return torch.tensor(float(user % 3))

    def local_term(self, w, w_start, state):
        return (1.0 + state.item()) * self.mu * ((w - w_start) ** 2).sum()


class FloatState(ProxTerm):
    """A client state holding a Python float beside a tensor: it cannot be stacked."""

    name = "float_state"

    def client_state(self, user, w):
        return {"weight": 1.0 + user % 3, "anchor": torch.zeros_like(w)}

    def local_term(self, w, w_start, state):
        return state["weight"] * self.mu * ((w - w_start - state["anchor"]) ** 2).sum()
