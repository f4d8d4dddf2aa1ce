"""Deprecated: the old names, kept so that plug-ins written against them keep working
(``from fedmgda.aggregators import Aggregator, RoundContext``), until fedmgda 0.2.0 (plug-in
interface 1, docs/plugins.md §6). ``Aggregator`` is
``fedmgda.algorithms.Algorithm``; new code imports from ``fedmgda.algorithms`` (docs/plugins.md).
"""

from fedmgda.algorithms.afl import AFL
from fedmgda.algorithms.averaging import WeightedUpdates, decay_per_100_rounds
from fedmgda.algorithms.base import INTERFACE_1_REMOVED_IN, ClientRound, HParam, RoundContext
from fedmgda.algorithms.base import Algorithm as Aggregator
from fedmgda.algorithms.linalg import gram_matrix, normalise_rows, unit_rows
from fedmgda.algorithms.qfedavg import QFedAvg
from fedmgda.catalog import make_algorithm as make_aggregator
from fedmgda.errors import warn_deprecated

__all__ = ["AFL", "Aggregator", "ClientRound", "HParam", "QFedAvg", "RoundContext",
           "WeightedUpdates",
           "decay_per_100_rounds", "gram_matrix", "make_aggregator", "normalise_rows", "unit_rows"]

warn_deprecated("fedmgda.aggregators is deprecated (plug-in interface 1): import Algorithm (its "
                "Aggregator), HParam, RoundContext and ClientRound from fedmgda.algorithms; it "
                f"still imports until fedmgda {INTERFACE_1_REMOVED_IN} (docs/plugins.md, "
                "\"Interface versions\")")
