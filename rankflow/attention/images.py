"""An offline image task: procedurally drawn shapes, generated from a seed.

Each image is ``size × size`` grayscale, one shape of one of ``classes`` kinds
(:data:`SHAPES`: disk, square, triangle, plus, ring, frame, L, T, two dots, half disk),
drawn with a random centre, scale, aspect ratio and rotation, a random contrast on a
random background level, anti-aliased edges, then Gaussian pixel noise of std
``noise``. The labels are balanced (class counts differ by at most one) and shuffled.
Rotation is uniform over the full circle, so a square cannot be told from a diamond
by orientation and the classes differ in shape only; positions vary, so no single
pixel template separates them (the linear baseline of :func:`linear_baseline`).

The images are drawn with NumPy (no compilation; the same bits whatever JAX's ``x64``
is) from a ``numpy.random.default_rng`` seed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float

__all__ = ["MAX_CLASSES", "SHAPES", "linear_baseline", "patchify", "render", "unpatchify"]

SHAPES = (
    "disk",
    "square",
    "triangle",
    "plus",
    "ring",
    "frame",
    "L",
    "T",
    "two_dots",
    "half_disk",
)
MAX_CLASSES = len(SHAPES)

# Distortion ranges, in units of the image's half-width (pixel centres span [−1, 1]).
SCALE = (0.35, 0.6)  # shape radius
ASPECT = (0.75, 1.33)  # stretch along the shape's first axis
CONTRAST = (0.4, 1.0)  # shape intensity above the background
BACKGROUND = (-0.2, 0.2)


def _box(u, v, a, b):
    return np.maximum(np.abs(u) - a, np.abs(v) - b)


def _disk(u, v, cx, r):
    return np.sqrt((u - cx) ** 2 + v * v) - r


# Approximate signed distances (negative inside) of each shape at the points (u, v) of
# the shape's own frame, where the shape has radius about 1.
_SDF = {
    "disk": lambda u, v: _disk(u, v, 0.0, 1.0),
    "square": lambda u, v: _box(u, v, 0.8, 0.8),
    "triangle": lambda u, v: (
        np.max([np.cos(a) * u + np.sin(a) * v for a in np.deg2rad([90, 210, 330])], axis=0) - 0.5
    ),
    "plus": lambda u, v: np.minimum(_box(u, v, 0.9, 0.28), _box(u, v, 0.28, 0.9)),
    "ring": lambda u, v: np.abs(_disk(u, v, 0.0, 0.72)) - 0.24,
    "frame": lambda u, v: np.abs(np.maximum(np.abs(u), np.abs(v)) - 0.66) - 0.2,
    "L": lambda u, v: np.minimum(_box(u + 0.55, v, 0.25, 0.85), _box(u, v + 0.6, 0.85, 0.25)),
    "T": lambda u, v: np.minimum(_box(u, v - 0.6, 0.85, 0.25), _box(u, v, 0.25, 0.85)),
    "two_dots": lambda u, v: np.minimum(_disk(u, v, 0.5, 0.4), _disk(u, v, -0.5, 0.4)),
    "half_disk": lambda u, v: np.maximum(_disk(u, v, 0.0, 1.0), -v - 0.2),
}


def render(
    seed: int | tuple[int, ...], n: int, *, size: int, classes: int, noise: float
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images of ``classes`` shapes (the first ``classes`` of :data:`SHAPES`) and
    their labels, from ``numpy.random.default_rng(seed)``: float32 images
    (n, size, size), int32 labels (n,)."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % classes).astype(np.int32)
    g = rng.random((7, n, 1, 1))
    lerp = lambda x, lo_hi: lo_hi[0] + (lo_hi[1] - lo_hi[0]) * x
    scale, aspect = lerp(g[0], SCALE), lerp(g[1], ASPECT)
    angle = 2 * np.pi * g[2]
    # Centres keep the shape mostly inside the frame.
    cx, cy = (0.8 * lerp(x, (-1 + scale, 1 - scale)) for x in g[3:5])
    contrast, background = lerp(g[5], CONTRAST), lerp(g[6], BACKGROUND)
    grid = (2 * np.arange(size) + 1) / size - 1
    x, y = grid[None, None, :], grid[None, :, None]
    c, s = np.cos(angle), np.sin(angle)
    u = (c * (x - cx) + s * (y - cy)) / (scale * aspect)
    v = (-s * (x - cx) + c * (y - cy)) / scale
    sdf = np.empty((n, size, size))
    for k in range(classes):
        i = labels == k
        sdf[i] = _SDF[SHAPES[k]](u[i], v[i])
    # Edges about half a pixel wide: the distance is in shape units, where a pixel is
    # 2/(size·scale); sharper than that aliases, softer blurs the small shapes away.
    ink = 1 / (1 + np.exp(np.clip(sdf * size * scale * 2, -50, 50)))
    images = background + contrast * ink + noise * rng.standard_normal((n, size, size))
    return images.astype(np.float32), labels


def patchify(images: Float[Array, "*B S S"], patch: int) -> Float[Array, "*B N P"]:
    """Split ``S × S`` images into ``N = (S/p)²`` patches of ``P = p²`` pixels, in
    row-major patch order, each flattened row-major."""
    *lead, S, _ = images.shape
    g = S // patch
    x = jnp.reshape(images, (*lead, g, patch, g, patch))
    x = jnp.swapaxes(x, -3, -2)  # (*B, g_row, g_col, p_row, p_col)
    return jnp.reshape(x, (*lead, g * g, patch * patch))


def unpatchify(patches: Float[Array, "*B N P"], patch: int) -> Float[Array, "*B S S"]:
    """The inverse of :func:`patchify`."""
    *lead, N, _ = patches.shape
    g = int(round(np.sqrt(N)))
    x = jnp.reshape(patches, (*lead, g, g, patch, patch))
    x = jnp.swapaxes(x, -3, -2)
    return jnp.reshape(x, (*lead, g * patch, g * patch))


def linear_baseline(
    train: tuple[Array, Array],
    val: tuple[Array, Array],
    classes: int,
    *,
    l2: float = 1e-4,
    iterations: int = 500,
) -> dict[str, float]:
    """Multinomial logistic regression on the pixels (weights and biases, L2 penalty
    ``l2``·‖W‖²/2 to make the optimum unique), fitted to ``train = (images, labels)`` by
    L-BFGS for ``iterations`` iterations in float64 (to convergence: the final gradient
    norm is returned). Returns ``{"chance": 1/classes, "linear_train": accuracy,
    "linear_val": accuracy on val, "grad_norm": ‖∇‖ at the end}``."""
    with jax.enable_x64(True):
        x = jnp.reshape(jnp.asarray(train[0], jnp.float64), (len(train[1]), -1))
        mean, std = jnp.mean(x, 0, keepdims=True), jnp.std(x, 0, keepdims=True) + 1e-12
        x = (x - mean) / std
        y = jnp.asarray(train[1])
        xv = (jnp.reshape(jnp.asarray(val[0], jnp.float64), (len(val[1]), -1)) - mean) / std

        def objective(wb):
            logits = x @ wb[0] + wb[1][None]
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return ce + 0.5 * l2 * jnp.sum(wb[0] ** 2)

        wb = (jnp.zeros((x.shape[1], classes)), jnp.zeros(classes))
        opt = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(objective)

        def step(carry, _):
            wb, state = carry
            value, grad = value_and_grad(wb, state=state)
            updates, state = opt.update(grad, state, wb, value=value, grad=grad, value_fn=objective)
            return (optax.apply_updates(wb, updates), state), None

        (wb, _), _ = jax.lax.scan(step, (wb, opt.init(wb)), None, length=iterations)
        grad = jax.grad(objective)(wb)
        hits = lambda xs, ys: jnp.argmax(xs @ wb[0] + wb[1][None], -1) == ys
        accuracy = lambda xs, ys: float(jnp.mean(hits(xs, ys).astype(jnp.float64)))
        return {
            "chance": 1.0 / classes,
            "linear_train": accuracy(x, y),
            "linear_val": accuracy(xv, jnp.asarray(val[1])),
            "grad_norm": float(optax.tree.norm(grad)),
        }
