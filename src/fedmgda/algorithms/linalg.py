"""Overflow-proof directions and Gram matrices of client updates, shared by the normalising and
min-norm QP rules (``fedmgda.algorithms.averaging``) and open to plug-ins (docs/plugins.md).

Extreme updates (docs/protocol-choices.md, "Non-finite reports"): a finite update of any magnitude
gives its own direction (``normalise_rows``), so a scaling attacker of any factor weighs as an
honest user in the normalising rules; the QP gets a finite Gram matrix (``gram_matrix``). When
nothing overflows, every number is the one the plain float32 expressions give.

This module imports torch: the rules import it when they aggregate, not when the catalog reads them.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def normalise_rows(updates: torch.Tensor) -> torch.Tensor:
    """Each (finite) update divided by its full-model L2 norm (a zero update stays zero).

    Overflow-proof: a float32 norm overflows once the update's entries reach about 1e19 (a scaling
    attacker) and loses its precision below about 1e-19; such rows are scaled by their largest
    entry and normalised in float64 (``unit_rows``), so any finite nonzero update gives its own
    direction. The other rows are exactly ``u / ||u||`` in the updates' dtype."""
    norms = updates.norm(dim=1, keepdim=True)
    directions = updates / torch.where(norms > 0, norms, torch.ones_like(norms))
    tiny = math.sqrt(torch.finfo(updates.dtype).tiny)  # below: the squares are subnormal or zero
    redo = ~torch.isfinite(norms[:, 0]) | ((norms[:, 0] < tiny) & (updates != 0).any(dim=1))
    if redo.any():
        directions[redo] = unit_rows(updates[redo]).to(updates.dtype)
    return directions


def unit_rows(rows: torch.Tensor) -> torch.Tensor:
    """Finite nonzero rows as unit vectors in float64, each scaled by its largest |entry| first
    (no square can overflow or underflow)."""
    scaled = rows.double() / rows.abs().amax(dim=1, keepdim=True).double()
    return scaled / scaled.norm(dim=1, keepdim=True)


def gram_matrix(directions: torch.Tensor) -> np.ndarray:
    """K_ij = <d_i, d_j> of finite rows as a float64 array, for the min-norm QP. Computed in the
    rows' dtype; when an entry overflows it (raw updates of a scaling attacker) or the largest one
    is below the dtype's normal range, in float64 from the rows divided by their largest |entry|:
    the QP's minimiser does not change when K is scaled
    (``fedmgda.algorithms.qp.min_norm_weights``)."""
    gram = (directions @ directions.T).double().cpu().numpy()
    if (np.isfinite(gram).all()
        and not (np.max(np.diag(gram)) < torch.finfo(directions.dtype).tiny
                 and bool((directions != 0).any()))):
        return gram
    scaled = directions.double() / directions.abs().max().double()
    return (scaled @ scaled.T).cpu().numpy()
