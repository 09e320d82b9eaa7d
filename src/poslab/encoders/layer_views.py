"""One learned set per layer for an encoder whose hooks take no layer index (``rotate``).

The backbone asks ``encoder.for_layer(i)`` for the encoder of layer i's attention. An encoder with one set of
parameters per layer (LieRE's generators, RoPE-Mixed's frequencies: their references train one per layer)
answers with a *view* of itself: the same module (its parameters, buffers and options shared, not copied),
``layer`` set to i, so its hooks read set i. Nothing else changes for the encoders that ignore it.
"""

from __future__ import annotations

import copy


class LayerViews:
    """Mixin for a :class:`~poslab.encoders.base.PositionEncoder` whose parameters have a leading axis of
    ``sets`` (the model's depth, or 1 for one set shared by the layers); its hooks read set :attr:`layer`."""

    #: The set this module's hooks read (0 on the module itself; i on layer i's view).
    layer: int = 0
    #: How many sets its parameters hold.
    sets: int = 1

    def for_layer(self, index: int):
        """Layer ``index``'s view: a shallow copy sharing every parameter, reading set ``index`` (cycled)."""
        if self.sets <= 1:
            return self
        views = self.__dict__.setdefault("_layer_views", {})
        which = index % self.sets
        if which not in views:
            view = copy.copy(self)  # the same parameter, buffer and submodule tables: one module, seen per layer
            view.layer = which
            views[which] = view
        return views[which]
