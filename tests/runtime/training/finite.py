"""Central finite differences of a training session's loss: the gradient oracle the training tests share."""

from __future__ import annotations

import numpy as np


def finite_differences(session, feeds, rng, picks: int, eps: float = 1e-6) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Run one step of `session` on `feeds`, then for `picks` random entries of each parameter (drawn from
    `rng`): its analytic gradient and ``(loss(w + eps) - loss(w - eps)) / (2 eps)``, by parameter name.
    Every parameter is set back to its value afterwards."""
    session.run(feeds)
    grads, base = session.gradients(), session.parameters()
    out = {}
    for w, value in base.items():
        analytic, numeric = [], []
        for k in rng.choice(value.size, size=min(picks, value.size), replace=False):
            losses = []
            for sign in (1, -1):
                moved = value.copy()
                moved.flat[k] += sign * eps
                session.set_parameters({w: moved})
                losses.append(session.run(feeds))
            session.set_parameters({w: value})
            numeric.append((losses[0] - losses[1]) / (2 * eps))
            analytic.append(grads[w].flat[k])
        out[w] = (np.array(analytic), np.array(numeric))
    return out
