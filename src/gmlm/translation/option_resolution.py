"""A translator's decoding options: the options class of its model's kind, with the
checkpoint's own defaults (its decoding.json, :mod:`gmlm.checkpoint.decoding_defaults`) in
place of the class defaults they replace, then the caller's settings, checked and validated
against the model once (:func:`gmlm.decoding.options.decoding_options`). Options this
resolver returned come back (e.g. passed to ``translate``) and are used as they are."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from gmlm.decoding.options import OPTIONS, DecodingOptions, changed_fields, decoding_options
from gmlm.models import ModelKind
from gmlm.nn.config import ModelConfig


class OptionResolver:
    """The options of a `kind` model with `config`, under the checkpoint's `defaults`."""

    def __init__(self, kind: ModelKind, config: ModelConfig, defaults: Mapping[str, Any]):
        self.kind = kind
        self.config = config
        self.defaults: dict[str, Any] = dict(defaults)
        # The options objects `resolve` returned (by id, while they live): passed back they
        # are used as they are (a variant with length_shift=0 stays 0).
        self._issued: weakref.WeakValueDictionary[int, DecodingOptions] = (
            weakref.WeakValueDictionary()
        )
        decoding_options(kind, config, None, self.defaults)  # fail here, not at first use

    def resolve(
        self, options: DecodingOptions | None, overrides: Mapping[str, Any]
    ) -> DecodingOptions:
        """`options` (default: the class defaults) with the checkpoint's defaults in place of
        the class defaults it keeps (unless this resolver issued it), then `overrides` (None
        keeps a value): checked and validated once."""
        given = {name: value for name, value in overrides.items() if value is not None}
        if options is not None and self._issued.get(id(options)) is options:
            if not given:
                return options
            resolved = decoding_options(self.kind, self.config, options, given)
        elif options is None or isinstance(options, OPTIONS[self.kind]):
            chosen = {} if options is None else changed_fields(options)
            resolved = decoding_options(
                self.kind, self.config, None, self.defaults | chosen | given
            )
        else:  # the other kind's options: refused, naming this checkpoint's kind
            resolved = decoding_options(self.kind, self.config, options, given)
        self._issued[id(resolved)] = resolved
        return resolved
