"""What the attention cache and the activation cache share: a mapping of canonical site names to tensors.

:class:`SiteCache` is keyed by the names of :mod:`workbench.model.sites` (``"enc.2.resid"``,
``"dec.0.cross.pattern"``); every lookup goes through :func:`~workbench.model.sites.site_name`, so a kind with a
layer (``cache["dec.cross", -1]``), a hook point's module path and, with a DeprecationWarning, the old capture keys
(``cache["cross", 0]``) find the same tensor. When a site was recorded several times (step-by-step decoding),
``cache[name]`` is the last call and :meth:`SiteCache.calls` gives all of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from workbench.errors import SiteNameError
from workbench.model.sites import describe_sites, kind_name, site_name, split_site

__all__ = ["SiteCache"]


class SiteCache(Mapping):
    """Tensors of one run, canonical site name -> tensor (the last call); old spellings accepted with a warning.

    Args:
        n_layers: kind -> number of layers the model has (``{"enc.self": 6, ...}``), to resolve negative layers.
    """

    def __init__(self, n_layers: Mapping[str, int] | None = None) -> None:
        self._n_layers = dict(n_layers or {})
        self._calls: dict[str, list[Tensor]] = {}

    # -- recording ---------------------------------------------------------------------------------------------
    def _record(self, name: str, value: Tensor) -> None:
        self._calls.setdefault(name, []).append(value)

    # -- reading -----------------------------------------------------------------------------------------------
    def _missing(self, name: str) -> str:
        """The message for a well-formed site that was not recorded (subclasses say how to record it)."""
        return f"site {name!r} was not recorded; this cache has {describe_sites(self._calls) or 'nothing'}"

    def site(self, key: Any) -> str:
        """The canonical name of ``key`` in this cache (the one resolver, :func:`~workbench.model.sites.site_name`).

        Raises:
            SiteNameError: a misspelt key, or a site this cache did not record; the message lists what it has.
        """
        name = site_name(key, n_layers=self._n_layers)
        if name not in self._calls:
            kind, layer, _ = split_site(name)
            if layer is not None and not layer < self._n_layers.get(kind, 0):  # no such site in this model
                site_name(name, valid=self._calls)  # raises: the closest recorded name and the recorded ones
            raise SiteNameError(self._missing(name))
        return name

    def __getitem__(self, key: Any) -> Tensor:
        return self._calls[self.site(key)][-1]

    def calls(self, key: Any, layer: int | None = None, field: str | None = None) -> list[Tensor]:
        """Every recorded call of one site, in order: ``calls("dec.0.self.pattern")`` or ``calls("dec.self", 0)``."""
        if layer is not None:
            key = (key, layer) if field is None else (key, layer, field)
        return list(self._calls[self.site(key)])

    def __iter__(self) -> Iterator[str]:
        return iter(self._calls)

    def __len__(self) -> int:
        return len(self._calls)

    def layers(self, kind: str, field: str | None = None) -> list[int]:
        """The layers recorded for a kind (``"dec.cross"``; old spellings such as ``"cross"`` warn): those where
        any of its fields was recorded, or with ``field`` (``"pattern"``) those where that one was."""
        kind = kind_name(kind)
        return sorted({layer for name in self._calls for k, layer, f in [split_site(name)]
                       if k == kind and (field is None or f == field)})

    def stack(self, kind: str, field: str | None = None) -> Tensor:
        """All recorded layers of one kind stacked: (L, B, H, Tq, Tk) for attention weights (``field`` None: the
        ``"pattern"``; the layers are those where that field was recorded).

        Raises:
            SiteNameError: a misspelt kind or field, or no layer of it was recorded (the message says what was).
        """
        kind = kind_name(kind)
        first = site_name((kind, 0) if field is None else (kind, 0, field))  # checks the field; the default one
        wanted = split_site(first)[2]
        layers = self.layers(kind, wanted)
        if not layers:
            raise SiteNameError(self._missing(first.replace(".0.", ".*.", 1)))
        return torch.stack([self[(kind, layer) if wanted is None else (kind, layer, wanted)] for layer in layers])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} sites: {describe_sites(self._calls)})"
