"""Parameter groups and optax optimizers with weight decay per group.

Every optimizer is ``chain(direction, decay_g for g in train.decay, scale(−η))``, its
``direction`` the core family's kind's of the same name
(:meth:`rankflow.core.dynamics.discrete.DiscreteKind.direction`), with
``decay_g = optax.add_decayed_weights(λ_g, mask=group g)``, so a step is
``θ ← θ − η(u + λ_g θ)`` on decayed groups and ``θ ← θ − ηu`` elsewhere, with ``u``:

- ``sgd``: the (minibatch) gradient (GD of docs/theory.md on decayed groups);
- ``momentum``: the EMA ``M ← (1−μ)M + μg`` (decoupled decay, docs/theory.md's table);
- ``adamw``: Adam's direction; the chain is exactly ``optax.adamw`` with a mask;
- ``sign_gd``: ``sign(g)`` (``optax.sign_sgd``'s direction);
- ``signum``: ``sign(M)``, ``M`` momentum's EMA (``optax.signum`` with β = 1 − μ);
- ``lion``: ``optax.scale_by_lion``'s (its own β₁ = 0.9, β₂ = 0.99; μ is not read);
- ``muon``: ``optax.contrib.muon``'s, with the matrices named by :func:`muon_dimensions`:
  each head's W_Q^h, W_K^h, W_V^h (D×d_h) and W_O^h (d_h×D) and each MLP weight
  orthogonalised (Nesterov momentum β = 0.95, Newton–Schulz), Adam's direction (muon's
  own AdamW branch: Nesterov, ``train.b1``, ``train.b2``, ``train.eps``) on the
  embeddings, positions, read-out, biases and LayerNorms.

The decay ``λ_g θ`` is added after the direction and before η in every optimizer, on
Muon's and Adam's leaves alike: ``ηλ_g`` per step, as in the core family's kinds.

η, λ_g and μ are traced (one compilation serves a sweep of them); the masks are static.

Learning-rate multipliers (``train.lr_<group>``, ``train.lr_<factor>`` for q, k, v, o):
a leaf's step is ``θ ← θ − c·η_k(u + λ_g θ)`` with ``c`` its group's multiplier times its
factor's (PyTorch's per-group lr: the decoupled decay is scaled too); traced, 1 by
default. ``η_k = η(k)`` under a schedule, else η: the learning rate is a number or a
schedule function of the step, as in optax (:func:`rankflow.numerics.schedules.learning_rate`
into ``optax.scale_by_learning_rate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import optax

from ..core.dynamics import DYNAMICS
from ..numerics.schedules import Schedule, learning_rate
from .config import FACTORS, GROUPS

__all__ = [
    "factor_of",
    "group_of",
    "group_tree",
    "make_optimizer",
    "mask",
    "muon_dimensions",
    "per_leaf_lam",
    "per_leaf_lr",
    "scale_per_leaf",
]

_QK = ("W_Q", "W_K", "b_Q", "b_K")
_VO = ("W_V", "W_O", "b_V", "b_O")


def _name(entry) -> str:
    return str(getattr(entry, "key", getattr(entry, "name", getattr(entry, "idx", entry))))


def group_of(path) -> str:
    """The group of a parameter from its pytree path (``blocks/0/attn/W_Q`` → ``qk``)."""
    names = [_name(e) for e in path]
    leaf = names[-1]
    if "attn" in names:
        if leaf in _QK:
            return "qk"
        if leaf in _VO:
            return "vo"
    elif "mlp" in names:
        return "mlp"
    elif any(n in ("ln1", "ln2", "ln_f") for n in names):
        return "norm"
    elif names[0] in ("embed", "pos", "unembed"):
        return "embed"
    raise ValueError(f"no parameter group for {'/'.join(names)}")


def factor_of(path) -> str | None:
    """The attention factor (q, k, v, o) of a parameter (its weight or bias), else None."""
    names = [_name(e) for e in path]
    if "attn" not in names or names[-1] not in _QK + _VO:
        return None
    return names[-1][-1].lower()


def per_leaf_lr(params, lr: Mapping[str, object]):
    """Each leaf's learning-rate multiplier: ``lr[group]``, times ``lr[factor]`` for the
    attention factors (``lr`` keyed by :data:`GROUPS` and :data:`FACTORS`)."""

    def leaf(path, _):
        c = lr[group_of(path)]
        factor = factor_of(path)
        return c if factor is None else c * lr[factor]

    return jax.tree_util.tree_map_with_path(leaf, params)


def scale_per_leaf(scales) -> optax.GradientTransformation:
    """``u ← c u`` leaf by leaf, ``c`` a pytree of (traced) scalars like the updates."""

    def update_fn(updates, state, params=None):
        del params
        return jax.tree.map(lambda u, c: c * u, updates, scales), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def group_tree(params):
    """A pytree like ``params`` holding each leaf's group name."""
    return jax.tree_util.tree_map_with_path(lambda p, _: group_of(p), params)


def mask(params, group: str):
    """The boolean mask of one group (a pytree like ``params``)."""
    return jax.tree_util.tree_map_with_path(lambda p, _: group_of(p) == group, params)


# The matrix axes of the attention factors (H×D×d_h and H×d_h×D): x W = y with W's
# axis 1 the reduction (input) axis and axis 2 the output axis; the heads (axis 0) are
# independent matrices (optax vmaps over batch axes).
_HEAD_MATRIX = optax.contrib.MuonDimensionNumbers(reduction_axis=1, output_axis=2)
_MATRIX = optax.contrib.MuonDimensionNumbers(reduction_axis=0, output_axis=1)


def muon_dimensions(params):
    """Muon's leaves and their matrix axes (optax's ``muon_weight_dimension_numbers``):
    each head's attention factor (W_Q, W_K, W_V: D×d_h; W_O: d_h×D) and each 2-D MLP
    weight (D×RD, RD×D); None (optax's AdamW branch) on everything else: the embeddings,
    positions and read-out (Muon is for hidden layers' matrices, as in its reference
    implementation), the biases and the LayerNorms (not matrices). optax's own rule
    ("2-D is Muon") would put the 2-D embeddings on Muon and the per-head stacks (3-D)
    on Adam, the opposite."""

    def leaf(path, x):
        group = group_of(path)
        if group in ("qk", "vo") and _name(path[-1]).startswith("W_"):
            return _HEAD_MATRIX
        if group == "mlp" and x.ndim == 2:
            return _MATRIX
        return None

    return jax.tree_util.tree_map_with_path(leaf, params)


def per_leaf_lam(params, lam: Mapping[str, object], decay: Sequence[str]):
    """Each leaf's λ: its group's ``lam[g]`` when g is in ``decay``, else 0 (Python 0.0,
    so that undecayed leaves get no decay term at all)."""
    return jax.tree_util.tree_map_with_path(
        lambda p, _: lam[group_of(p)] if group_of(p) in decay else 0.0, params
    )


def make_optimizer(
    kind: str,
    params,
    hyper: Mapping[str, object],
    decay: Sequence[str],
    *,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    schedule: Schedule | None = None,
) -> optax.GradientTransformation:
    """The optimizer ``kind`` (:data:`~.config.OPTIMIZERS`) for parameters shaped like
    ``params``, with ``hyper`` holding traced ``eta``, ``mu``, ``lam_<group>`` and
    (optionally) the multipliers ``lr_<group>``, ``lr_<factor>``, decay on the groups
    ``decay`` only and η following ``schedule``. The direction ``u`` is the registered
    dynamics kind's (ValueError for a kind without one)."""
    dynamics = DYNAMICS.get(kind)
    extra = {"dimension_numbers": muon_dimensions(params)} if kind == "muon" else {}
    direction = dynamics and dynamics.direction(hyper, b1=b1, b2=b2, eps=eps, **extra)
    if direction is None:
        raise ValueError(f"dynamics.kind: no optimizer named {kind!r}")
    decays = [
        optax.add_decayed_weights(hyper[f"lam_{g}"], mask=mask(params, g))
        for g in GROUPS
        if g in decay
    ]
    lr_keys = [f"lr_{u}" for u in GROUPS + FACTORS]
    multipliers = []
    if all(k in hyper for k in lr_keys):
        lr = {u: hyper[f"lr_{u}"] for u in GROUPS + FACTORS}
        multipliers = [scale_per_leaf(per_leaf_lr(params, lr))]
    lr = optax.scale_by_learning_rate(learning_rate(hyper["eta"], schedule))
    return optax.chain(direction, *decays, *multipliers, lr)
