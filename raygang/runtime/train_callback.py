"""Moved to `raygang.runtime.client.train_callback`. This module stays so that a
`RAY_TRAIN_CALLBACKS=raygang.runtime.train_callback.RaygangTrain` set by an earlier raygang
(or by a user, as its README said) still finds the callback; `raygang.RaygangTrain` is the
path to set now."""

from raygang.runtime.client.train_callback import RaygangTrain

__all__ = ["RaygangTrain"]
