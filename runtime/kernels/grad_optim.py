"""Optimizer updates of a training step (memplan's own op types, domain "memplan"), applied in place.

`runtime.training` aliases each updated output to the input it replaces (W_next shares W's
bytes, V_next shares V's), so parameters and optimizer state stay at one place in the arena
from one training step to the next. The kernels therefore finish reading an input before
they overwrite the output that shares its bytes; they are also right when the two differ.
"""

from __future__ import annotations

import numpy as np

from runtime.kernels import MEMPLAN_DOMAIN, kernel


@kernel("SgdMomentumUpdate", domain=MEMPLAN_DOMAIN, outputs="many")
def sgd_momentum_update(w, g, v, *, out, lr=0.01, momentum=0.9, weight_decay=0.0):
    """V <- momentum * V + (G + weight_decay * W);  W <- W - lr * V  (PyTorch's SGD with momentum)."""
    w_next, v_next = out
    step = g + weight_decay * w if weight_decay else g
    np.multiply(v, momentum, out=v_next)
    v_next += step
    np.subtract(w, lr * v_next, out=w_next)


@kernel("AdamStepCount", domain=MEMPLAN_DOMAIN)
def adam_step_count(t, *, out):
    """The shared step counter of Adam's bias correction: t <- t + 1."""
    np.add(t, 1, out=out)


@kernel("AdamUpdate", domain=MEMPLAN_DOMAIN, outputs="many")
def adam_update(w, g, m, s, t, *, out, lr=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """Adam (Kingma & Ba, 2015) with bias correction; `t` is the step count after this step's increment."""
    w_next, m_next, s_next = out
    step = float(t.reshape(-1)[0])
    np.multiply(m, beta1, out=m_next)
    m_next += (1 - beta1) * g
    np.multiply(s, beta2, out=s_next)
    s_next += (1 - beta2) * g * g
    denom = np.sqrt(s_next / (1 - beta2**step)) + epsilon
    np.subtract(w, lr * (m_next / (1 - beta1**step)) / denom, out=w_next)
