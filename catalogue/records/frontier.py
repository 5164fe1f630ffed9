"""Distinct switch sets and their Pareto frontier per (kind, setting) (docs/planning.md).

Two switch sets are equivalent for a kind at a setting when they keep the same bytes in every
part and recompute the same FLOPs and bytes moved: one representative (the lowest mask) stands
for them. A set is on the frontier when no other set (full recompute included) keeps no more
bytes at no more recompute FLOPs and bytes moved, and less of one of them. Which set is the
cheapest to save a share of the bytes is a question of the catalogue: the query
sql/queries/cheapest_saving.sql answers it from these classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speccat.catalogue.records.priced import LayerPrices

FULL = -1  # the frontier's name for full recompute, beside the switch sets' masks 0..n-1


@dataclass(frozen=True)
class Frontier:
    """Per (kind, setting): the points (each switch set, then full recompute), their classes and the frontier."""

    kept: np.ndarray  # [kind, setting, point] bytes kept (points: masks 0..n-1, then full)
    flops: np.ndarray  # [kind, setting, point] recompute FLOPs
    moved: np.ndarray  # [kind, setting, point] recompute bytes moved
    representative: np.ndarray  # [kind, setting, mask]: the lowest equivalent mask
    on_frontier: np.ndarray  # [kind, setting, point]: no other point dominates it

    @property
    def n_masks(self) -> int:
        return self.representative.shape[2]

    def equivalents(self, k: int, i: int, mask: int) -> list[int]:
        rep = self.representative[k, i, mask]
        return [int(m) for m in np.flatnonzero(self.representative[k, i] == rep)]

    def frontier_points(self, k: int, i: int) -> list[int]:
        """Frontier representatives (and FULL), by bytes kept, largest first."""
        n = self.n_masks
        points = [p for p in np.flatnonzero(self.on_frontier[k, i]) if p == n or self.representative[k, i, p] == p]
        points.sort(key=lambda p: (-self.kept[k, i, p], self.flops[k, i, p], self.moved[k, i, p]))
        return [FULL if p == n else int(p) for p in points]


def _dominated(kept: np.ndarray, flops: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """[..., p]: whether some point q is <= p in all three and < in one."""
    le = (kept[..., :, None] <= kept[..., None, :]) & (flops[..., :, None] <= flops[..., None, :]) & (moved[..., :, None] <= moved[..., None, :])
    lt = (kept[..., :, None] < kept[..., None, :]) | (flops[..., :, None] < flops[..., None, :]) | (moved[..., :, None] < moved[..., None, :])
    return (le & lt).any(axis=-2)  # [..., q, p] reduced over q


def frontier(prices: LayerPrices, flops: np.ndarray, moved: np.ndarray, full_flops: np.ndarray, full_moved: np.ndarray) -> Frontier:
    """`flops`, `moved`: [kind, setting, mask] recompute costs (cost.OpCosts.masks); `full_*`:
    [kind, setting] (cost.OpCosts.forward)."""
    kept = np.concatenate([prices.total, prices.full[..., None]], axis=2)
    f = np.concatenate([flops, full_flops[..., None]], axis=2)
    m = np.concatenate([moved, full_moved[..., None]], axis=2)
    n = prices.total.shape[2]
    key = np.stack([prices.attention, prices.ffn, prices.norm, flops, moved], axis=-1)  # [k, i, mask, 5]
    same = (key[:, :, :, None, :] == key[:, :, None, :, :]).all(axis=-1)  # [k, i, mask, mask]
    representative = same.argmax(axis=3).astype(np.int16)  # the first (lowest) equal mask
    return Frontier(kept, f, m, representative, ~_dominated(kept, f, m))

