"""An algorithm's hooks, checked where the engine receives what they return (docs/plugins.md).

The simulator calls an algorithm's hooks through :class:`CheckedHooks`, which checks each result
against the hook's contract and raises one :class:`fedmgda.errors.PluginError` naming the
algorithm (a plug-in by its ``path:Class`` too), the hook, what it returned and what was expected:

- ``aggregate(w, updates, ctx)``: a pair (next global model, dict); the model a tensor of ``w``'s
  shape, dtype and device; the dict's ``eta``, when given, a number. A model that is not finite
  is not a contract error: the run is recorded as diverged, as any algorithm's.
- ``client_state(user, w)``: a state the checkpoints can keep: None, a number, a string, a
  tensor, or lists / tuples / dicts of them.
- ``after_training(client)``: a pair (new state, report), both such values.
- ``local_term(w, w_start, state)``: a one-element floating-point tensor (its value is added to the
  objective). Only what it is is checked, not its value, so the check holds inside ``vmap``.

A plug-in's hook that raises (other than a ``FloatingPointError`` of ``aggregate``: numbers that
are not finite, as the package's own checks raise it, which means divergence) is reported the
same way; any other exception, a ``ValueError`` too, is a failure, not a divergence. A run
whose hook fails is recorded as failed (``Simulation.steps``) and leaves its pack
(``fedmgda.scheduler.run_packed``).
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from fedmgda.errors import PluginError

# aggregate's way of saying "diverged": numbers not finite (fedmgda.algorithms.qp's checks raise it)
DIVERGENCE = (FloatingPointError,)
STATE_TYPES = "None, a number, a string, a tensor, or lists / tuples / dicts of them"


def describe(value: Any) -> str:
    """A short description of a returned value for an error message."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}, dtype {value.dtype}, on {value.device}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"{type(value).__name__} {value!r}"[:120]


def is_state(value: Any) -> bool:
    """Whether ``value`` is a client state or report the checkpoints can keep (``STATE_TYPES``)."""
    if value is None or isinstance(value, (numbers.Number, str, torch.Tensor)):
        return True
    if isinstance(value, (list, tuple)):
        return all(is_state(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, (str, int)) and is_state(v) for k, v in value.items())
    return False


class CheckedHooks:
    """The hooks of one run's ``algorithm`` (a ``fedmgda.algorithms.Algorithm``), each result
    checked. ``name`` is its name, ``plugin`` its ``path:Class`` (None: built in), ``owner`` the
    run (named in the errors raised while the scheduler trains its clients)."""

    def __init__(self, algorithm: Any, name: str, plugin: str | None, owner: object = None):
        self.algorithm, self.plugin, self.owner = algorithm, plugin, owner
        self.who = f"plug-in {name!r} ({plugin})" if plugin else f"algorithm {name!r}"

    def fail(self, hook: str, problem: str) -> PluginError:
        return PluginError(f"{self.who}, hook {hook}: {problem}", self.owner)

    def call(self, hook: str, *args: Any, passes: tuple[type[BaseException], ...] = ()) -> Any:
        """The hook's result; a plug-in's exception (other than ``passes``) as a PluginError."""
        try:
            return getattr(self.algorithm, hook)(*args)
        except passes:
            raise
        except Exception as error:
            if not self.plugin:
                raise
            raise self.fail(hook, f"raised {type(error).__name__}: {error}") from error

    def pair(self, hook: str, result: Any, expected: str) -> tuple[Any, Any]:
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise self.fail(hook, f"returned {describe(result)}; expected a pair ({expected})")
        return result[0], result[1]

    def aggregate(self, w: torch.Tensor, updates: torch.Tensor,
                  ctx: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        model, info = self.pair("aggregate",
                                self.call("aggregate", w, updates, ctx, passes=DIVERGENCE),
                                "the next global model, a dict of what to log")
        expected = (f"the next global model: a flat tensor of shape {tuple(w.shape)}, "
                    f"dtype {w.dtype}, on {w.device}, as w")
        if (not isinstance(model, torch.Tensor)
            or (model.shape, model.dtype, model.device) != (w.shape, w.dtype, w.device)):
            raise self.fail("aggregate",
                            f"returned as its model {describe(model)}; expected {expected}")
        if not isinstance(info, dict):
            raise self.fail("aggregate",
                            f"returned as its log {describe(info)}; expected a dict (e.g. {{'eta': "
                            f"1.0}})")
        eta = info.get("eta")
        if (eta is not None
            and not (isinstance(eta, numbers.Real)
                     or (isinstance(eta, torch.Tensor) and eta.numel() == 1))):
            raise self.fail("aggregate", f"logged eta = {describe(eta)}; expected a number")
        return model, info

    def client_state(self, user: int, w: torch.Tensor) -> Any:
        state = self.call("client_state", user, w)
        if not is_state(state):
            raise self.fail("client_state",
                            f"returned {describe(state)}; expected a client state: {STATE_TYPES}")
        return state

    def after_training(self, client: Any) -> tuple[Any, Any]:
        state, report = self.pair("after_training", self.call("after_training", client),
                                  "new state, report")
        for what, value in (("new state", state), ("report", report)):
            if not is_state(value):
                raise self.fail("after_training",
                                f"returned as its {what} {describe(value)}; expected {STATE_TYPES}")
        return state, report

    def local_term(self, w: torch.Tensor, w_start: torch.Tensor, state: Any) -> torch.Tensor:
        """A client's term of its local objective, ``local_term(w, w_start, state)``, its result
        checked (the engine vmaps it over a run's clients with their states stacked)."""
        value = self.call("local_term", w, w_start, state)
        if (not isinstance(value, torch.Tensor) or value.numel() != 1
            or not value.is_floating_point()):
            raise self.fail("local_term",
                            f"returned {describe(value)}; expected a one-element floating-point "
                            "tensor (a scalar added to the local objective)")
        return value
