"""The old home of the algorithms, kept so that plug-ins written against it keep working
(``from fedmgda.aggregators import Aggregator, RoundContext``): the algorithms now live one module
each in ``fedmgda.algorithms`` and ``Aggregator`` is ``fedmgda.algorithms.Algorithm``. New code
imports from there.
"""

from fedmgda.algorithms.afl import AFL
from fedmgda.algorithms.averaging import WeightedUpdates, decay_per_100_rounds
from fedmgda.algorithms.base import Algorithm as Aggregator
from fedmgda.algorithms.base import ClientRound, HParam, RoundContext
from fedmgda.algorithms.linalg import gram_matrix, normalise_rows, unit_rows
from fedmgda.algorithms.qfedavg import QFedAvg
from fedmgda.catalog import make_algorithm as make_aggregator

__all__ = ["AFL", "Aggregator", "ClientRound", "HParam", "QFedAvg", "RoundContext", "WeightedUpdates",
           "decay_per_100_rounds", "gram_matrix", "make_aggregator", "normalise_rows", "unit_rows"]
