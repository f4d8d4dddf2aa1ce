"""Moved to :mod:`fedmgda.legacy_sort` (the partitioners, :mod:`fedmgda.partitioners`, need it
without torch); kept here for code that imports it from ``fedmgda.data``."""

from fedmgda.legacy_sort import SMALL_QUICKSORT, numpy_1_17_argsort

__all__ = ["SMALL_QUICKSORT", "numpy_1_17_argsort"]
