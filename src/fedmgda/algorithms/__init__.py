"""The algorithms, one module each: the paper's eight (docs/protocol.md §4) are declared exactly as
a plug-in is (docs/plugins.md), as a subclass of ``Algorithm`` whose class attributes are its
facts (name, hyper-parameters, flags) and whose methods are its server rule and client-side hooks.

    fedavg  fedavg_n  fedprox  fedmgda  fedmgda_plus  mgda_prox  qfedavg  afl
    base       the ``Algorithm`` contract, ``HParam``, ``RoundContext``, ``ClientRound``, and
               ``PLUGIN_INTERFACE``, the plug-in interface's version (docs/plugins.md)
    averaging  the rule the first six share (w + eta_t sum_i lambda_i u_i), the decay schedule
    linalg     overflow-proof norms and Gram matrices (torch)
    qp         the one min-norm QP of the MGDA rules (cvxopt)

``fedmgda.catalog`` lists the built-ins (``BUILTIN_CLASSES``) and reads their facts; a new
built-in is one module here plus its line there.
"""

from fedmgda.algorithms.base import PLUGIN_INTERFACE, Algorithm, ClientRound, HParam, RoundContext

__all__ = ["PLUGIN_INTERFACE", "Algorithm", "ClientRound", "HParam", "RoundContext"]
