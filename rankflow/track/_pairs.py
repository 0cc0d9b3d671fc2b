"""Factor pairs of a model's parameters: where A and B of each product ``W = A Bᵀ`` are,
how each is laid out, and how they split into theory units (heads).

A :class:`Factor` names a leaf of the parameter pytree by its path (``"blocks/0/attn/W_Q"``,
keys joined by ``/``) and its axes by a layout string over three letters:

- ``m``: the factor's outer dimension (A is m×r, B is n×r; both written ``m`` here);
- ``r``: the rank dimension that A and B share (the head dimension of attention);
- ``h``: the units (heads), absent for a single matrix.

``"hmr"`` is an (H, D, d_h) stack of heads (rankflow's W_Q), ``"hrm"`` an (H, d_h, D)
one (rankflow's W_O, so that B = W_Oᵀ per head), ``"mhr"`` flax's ``MultiHeadAttention``
query kernel (D, H, d_h), ``"m(hr)"`` a fused (D, H·d_h) matrix with heads as column
blocks, ``"(hr)m"`` its transpose (GPT-2's ``c_proj``), ``"mr"`` a plain m×r factor and
``"rm"`` an r×m one (LoRA's ``A``, stored (r, in)).

:func:`attention_pairs` finds the key–query and value–output pairs of every layer of
rankflow's attention model and of flax ``MultiHeadAttention`` modules (linen params or
NNX state) by their names; :func:`lora_pairs` those of LoRA adapters
(``lora_A``/``lora_B``, PEFT's names); anything else is declared with :class:`Pair`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..config.fields import ConfigError

__all__ = ["Factor", "Pair", "attention_pairs", "flat_params", "lora_pairs", "resolve_pairs"]

_LAYOUT = re.compile(r"^(?:[hmr]|\(hr\))+$")


class TrackError(ConfigError):
    """A layout that matches nothing, a missing path, mismatched pair shapes: one line
    naming what was expected.

    Examples:
        >>> from rankflow.track import Factor, TrackError
        >>> try:
        ...     Factor("w", "mq")
        ... except TrackError as e:
        ...     print(str(e)[:57])
        Factor layout: 'mq' is not one of the axis strings over h
    """


def _axes(layout: str) -> list[str]:
    """``"m(hr)"`` → ``["m", "hr"]``."""
    if not _LAYOUT.match(layout) or sorted(layout.replace("(", "").replace(")", "")) not in (
        ["m", "r"],
        ["h", "m", "r"],
    ):
        raise TrackError(
            f"Factor layout: {layout!r} is not one of the axis strings over h, m, r "
            "(e.g. 'mr', 'rm', 'hmr', 'hrm', 'mhr', 'm(hr)', '(hr)m')"
        )
    return re.findall(r"\(hr\)|[hmr]", layout)


@dataclass(frozen=True)
class Factor:
    """One factor of a pair: the leaf at ``path`` with axes ``layout`` (see the module
    docstring); ``heads``: the number of units of a fused ``(hr)`` axis.

    Examples:
        >>> import numpy as np
        >>> from rankflow.track import Factor
        >>> W = np.arange(24.0).reshape(4, 6)  # D = 4, two heads of d_h = 3, fused
        >>> Factor("w", "m(hr)", heads=2).units(W).shape  # (units, m, r)
        (2, 4, 3)
        >>> Factor("lora_A", "rm").units(np.ones((2, 5))).shape  # LoRA A, (r, in)
        (1, 5, 2)
    """

    path: str
    layout: str = "mr"
    heads: int = 1

    def __post_init__(self):
        _axes(self.layout)

    def units(self, x) -> jax.Array:
        """The factor as (units, m, r), jittable."""
        axes = _axes(self.layout)
        x = jnp.asarray(x)
        if x.ndim != len(axes):
            raise TrackError(
                f"{self.path}: layout {self.layout!r} wants a {len(axes)}-d array, got shape "
                f"{tuple(x.shape)}"
            )
        if "(hr)" in axes:  # split the fused axis, heads major
            i = axes.index("(hr)")
            if x.shape[i] % self.heads:
                raise TrackError(
                    f"{self.path}: axis {i} of length {x.shape[i]} does not split into "
                    f"{self.heads} heads"
                )
            x = jnp.reshape(
                x, x.shape[:i] + (self.heads, x.shape[i] // self.heads) + x.shape[i + 1 :]
            )
            axes = axes[:i] + ["h", "r"] + axes[i + 1 :]
        if "h" not in axes:
            x, axes = x[None], ["h"] + axes
        return jnp.transpose(x, [axes.index(a) for a in "hmr"])


@dataclass(frozen=True)
class Pair:
    """A factor pair ``W = A Bᵀ`` of layer ``layer`` named ``name`` (``"qk"``, ``"vo"``,
    ``"lora"``, …), each unit (head) a product of its own.

    Examples:
        >>> import numpy as np
        >>> from rankflow.track import Factor, Pair
        >>> lora = Pair("lora", 0, Factor("l0/lora_B", "mr"), Factor("l0/lora_A", "rm"))
        >>> params = {"l0": {"lora_B": np.ones((8, 2)), "lora_A": np.ones((2, 5))}}
        >>> [a.shape for a in lora.factors(params)]  # A (units, out, r), B (units, in, r)
        [(1, 8, 2), (1, 5, 2)]
    """

    name: str
    layer: int | str
    A: Factor
    B: Factor

    def factors(self, params) -> tuple[jax.Array, jax.Array]:
        """``(A, B)``, each (units, m, r), from a parameter pytree (or flat mapping)."""
        flat = params if _is_flat(params) else flat_params(params)
        A, B = (f.units(_leaf(flat, f.path)) for f in (self.A, self.B))
        if A.shape[0] != B.shape[0] or A.shape[2] != B.shape[2]:
            raise TrackError(
                f"pair {self.name} of layer {self.layer}: A {self.A.path} gives "
                f"{A.shape[0]} units of rank {A.shape[2]}, B {self.B.path} gives "
                f"{B.shape[0]} of rank {B.shape[2]}; they must match"
            )
        return A, B


def _is_flat(params) -> bool:
    """A mapping of path strings to arrays (a PyTorch ``state_dict``, or
    :func:`flat_params`'s output), not a nested pytree."""
    return isinstance(params, Mapping) and all(
        isinstance(k, str) and not isinstance(v, Mapping | list | tuple) for k, v in params.items()
    )


def _key_name(entry) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def flat_params(params) -> dict[str, object]:
    """``{"a/b/c": leaf}`` of a parameter pytree: nested dicts, flax linen params, flax
    NNX state or module (its ``Param`` variables), or a flat mapping (returned as is).

    Examples:
        >>> from rankflow.track import flat_params
        >>> sorted(flat_params({"blocks": [{"attn": {"W_Q": 1.0}}], "embed": 2.0}))
        ['blocks/0/attn/W_Q', 'embed']
    """
    if _is_flat(params):
        return dict(params)
    params = _pure(params)
    leaves, _ = jax.tree_util.tree_flatten_with_path(params)
    return {"/".join(_key_name(k) for k in path): leaf for path, leaf in leaves}


def _pure(params):
    """Flax NNX modules and states as plain nested dicts of arrays."""
    try:
        from flax import nnx
    except ImportError:  # pragma: no cover - flax is a core dependency
        return params
    if isinstance(params, nnx.Module):
        params = nnx.state(params, nnx.Param)
    to_pure = getattr(params, "to_pure_dict", None)
    return to_pure() if callable(to_pure) else params


def _leaf(flat: Mapping[str, object], path: str):
    if path not in flat:
        near = [p for p in flat if p.rsplit("/", 1)[-1] == path.rsplit("/", 1)[-1]][:3]
        hint = f"; same leaf name at: {', '.join(near)}" if near else ""
        raise TrackError(f"no parameter at path {path!r}{hint}")
    return flat[path]


# --- detection by names ----------------------------------------------------------------

# rankflow's attention model: blocks/{l}/attn/W_Q (H, D, d_h) … W_O (H, d_h, D).
_RANKFLOW = re.compile(r"^(?P<prefix>(?:.*/)?blocks/(?P<layer>\d+)/attn)/W_Q$")
# flax MultiHeadAttention (linen and NNX): …/query/kernel (D, H, d_h), …/out/kernel (H, d_h, D).
_FLAX = re.compile(r"^(?:(?P<prefix>.*)/)?query/kernel$")
# PEFT's LoRA names: …lora_A…weight (r, in) and …lora_B…weight (out, r).
_LORA = re.compile(r"^(?P<prefix>.*)lora_A(?P<suffix>.*)$")


def attention_pairs(params) -> list[Pair]:
    """The key–query (A = W_Q^h, B = W_K^h) and value–output (A = W_V^h, B = W_O^hᵀ)
    pairs of every attention layer found by name: rankflow's attention model
    (``blocks/{l}/attn/W_Q`` …) or flax ``MultiHeadAttention`` (``…/query/kernel`` …,
    linen params or NNX state). Layers are numbered in path order.

    Examples:
        >>> import numpy as np
        >>> from rankflow.track import attention_pairs
        >>> attn = {k: np.ones((2, 8, 4)) for k in ("W_Q", "W_K", "W_V")}
        >>> attn["W_O"] = np.ones((2, 4, 8))
        >>> [(p.name, p.layer, p.B.layout) for p in attention_pairs({"blocks": [{"attn": attn}]})]
        [('qk', 0, 'hmr'), ('vo', 0, 'hrm')]
    """
    flat = flat_params(params)
    pairs: list[Pair] = []
    for path in flat:
        m = _RANKFLOW.match(path)
        if m:
            p, layer = m["prefix"], int(m["layer"])
            pairs += [
                Pair("qk", layer, Factor(f"{p}/W_Q", "hmr"), Factor(f"{p}/W_K", "hmr")),
                Pair("vo", layer, Factor(f"{p}/W_V", "hmr"), Factor(f"{p}/W_O", "hrm")),
            ]
    if pairs:
        return pairs
    prefixes = [m["prefix"] for path in flat if (m := _FLAX.match(path))]
    for layer, p in enumerate(prefixes):
        j = f"{p}/" if p else ""
        pairs += [
            Pair("qk", layer, Factor(f"{j}query/kernel", "mhr"), Factor(f"{j}key/kernel", "mhr")),
            Pair("vo", layer, Factor(f"{j}value/kernel", "mhr"), Factor(f"{j}out/kernel", "hrm")),
        ]
    return pairs


def lora_pairs(params) -> list[Pair]:
    """LoRA adapters by PEFT's names: ``ΔW = B_lora A_lora`` with ``lora_B`` (out, r) and
    ``lora_A`` (r, in), so A = lora_B, B = lora_Aᵀ; numbered in path order.

    Examples:
        >>> import numpy as np
        >>> from rankflow.track import lora_pairs
        >>> params = {"q_proj": {"lora_A": {"weight": np.ones((2, 6))},
        ...                      "lora_B": {"weight": np.ones((6, 2))}}}
        >>> [(p.name, p.A.path, p.B.layout) for p in lora_pairs(params)]
        [('lora', 'q_proj/lora_B/weight', 'rm')]
    """
    flat = flat_params(params)
    pairs = []
    for path in flat:
        m = _LORA.match(path)
        if m and f"{m['prefix']}lora_B{m['suffix']}" in flat:
            b = f"{m['prefix']}lora_B{m['suffix']}"
            pairs.append(Pair("lora", len(pairs), Factor(b, "mr"), Factor(path, "rm")))
    return pairs


def resolve_pairs(params, pairs: Sequence[Pair] | str | None = "auto") -> list[Pair]:
    """The pairs to track: ``"auto"`` (attention, else LoRA, by names), or the given
    ones (checked: every path exists, the shapes match); a :class:`TrackError` naming
    what was looked for when nothing matches.

    Examples:
        >>> import numpy as np
        >>> from rankflow.track import resolve_pairs
        >>> lora = {"lora_A": {"weight": np.ones((2, 6))}, "lora_B": {"weight": np.ones((5, 2))}}
        >>> [(p.name, p.layer) for p in resolve_pairs(lora)]
        [('lora', 0)]
        >>> resolve_pairs({"dense": {"kernel": np.ones((3, 3))}})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rankflow.track._pairs.TrackError: pairs: no factor pairs found by name ...
    """
    if pairs is None or isinstance(pairs, str):
        if pairs not in (None, "auto", "attention", "lora"):
            raise TrackError(
                f"pairs: {pairs!r} is not 'auto', 'attention', 'lora' or a list of Pair"
            )
        found = [] if pairs == "lora" else attention_pairs(params)
        if not found and pairs != "attention":
            found = lora_pairs(params)
        if not found:
            some = ", ".join(list(flat_params(params))[:4]) or "no leaves"
            raise TrackError(
                "pairs: no factor pairs found by name (rankflow's blocks/{l}/attn/W_Q…, flax "
                "…/query/kernel…, PEFT …lora_A…/…lora_B…); parameters start "
                f"{some}; declare them with rankflow.track.Pair"
            )
        return found
    out = list(pairs)
    if not out or not all(isinstance(p, Pair) for p in out):
        raise TrackError("pairs: expected 'auto' or a non-empty list of rankflow.track.Pair")
    flat = flat_params(params)
    for p in out:
        p.factors(flat)  # every path exists and the shapes match, before anything runs
    return out


def as_numpy(x) -> np.ndarray:
    """A PyTorch tensor (through ``.detach().cpu().numpy()``) or an array as numpy."""
    detach = getattr(x, "detach", None)
    if callable(detach):
        x = detach().cpu().numpy()
    return np.asarray(x)
