"""Deprecated: the old names, kept so that plug-ins written against them keep working
(``from fedmgda.aggregators import Aggregator, RoundContext``). ``Aggregator`` is
``fedmgda.algorithms.Algorithm``; new code imports from ``fedmgda.algorithms`` (docs/plugins.md).
"""

import warnings

from fedmgda.algorithms.afl import AFL
from fedmgda.algorithms.averaging import WeightedUpdates, decay_per_100_rounds
from fedmgda.algorithms.base import Algorithm as Aggregator
from fedmgda.algorithms.base import ClientRound, HParam, RoundContext
from fedmgda.algorithms.linalg import gram_matrix, normalise_rows, unit_rows
from fedmgda.algorithms.qfedavg import QFedAvg
from fedmgda.catalog import make_algorithm as make_aggregator

__all__ = ["AFL", "Aggregator", "ClientRound", "HParam", "QFedAvg", "RoundContext", "WeightedUpdates",
           "decay_per_100_rounds", "gram_matrix", "make_aggregator", "normalise_rows", "unit_rows"]

warnings.warn("fedmgda.aggregators is deprecated: import Algorithm (its Aggregator), HParam, RoundContext "
              "and ClientRound from fedmgda.algorithms", DeprecationWarning, stacklevel=2)
