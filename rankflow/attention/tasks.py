"""Tasks: seeded, offline sequence data for the transformer, and their losses.

A batch is a dict of arrays over ``B`` sequences of ``T`` positions:

- ``inputs``: token ids ``(B, T)`` (int32), or vectors ``(B, T, d_in)`` for
  ``in_context_regression``;
- ``targets``: next-token ids ``(B, T)`` (int32) or real targets ``(B, T)``;
- ``weights``: ``(B, T)``, 1 where a position counts in the loss, 0 elsewhere.

Kinds:

- ``char_lm``: next-character prediction on the concatenated ``pydoc_data.topics``
  (the help texts shipped with every CPython, ~465k characters of English); the last
  ``val_fraction`` of it is held out. Training windows start anywhere in the training
  split; the validation set is ``val_size`` evenly spaced windows of the held-out split.
- ``associative_recall``: ``k₁ v₁ k₂ v₂ … k_P v_P q`` with distinct keys ``kᵢ`` (ids
  ``0 … keys−1``), values ``vᵢ`` (ids ``keys … keys+values−1``) and a query ``q = k_j``;
  the target at the last position is ``v_j``.
- ``in_context_regression``: ``(x₁, y₁) … (x_{N−1}, y_{N−1}) (x_N, 0)`` with
  ``x ~ N(0, I_d)``, one ``w ~ N(0, I_d/d)`` per sequence, ``y = wᵀx + noise·ε``; the
  model reads ``[x_i, y_i] ∈ R^{d+1}`` per position and predicts ``y_N`` at the last one.
- ``images``: classify ``image × image`` grayscale images of procedurally drawn shapes
  (:mod:`.images`) into ``classes`` classes, with the vision transformer. A fixed
  training set of ``train_size`` images and a validation set of ``val_size`` images are
  drawn from ``data_seed`` (the same for every run); minibatches are drawn from the
  training set with replacement. ``inputs`` are images ``(B, S, S)``, ``targets`` the
  labels ``(B, 1)`` and ``weights`` ones ``(B, 1)``: one labelled position per image.

The losses are means over the weighted positions: cross-entropy for token tasks and
images, ``½(ŷ − y)²`` for regression; classification tasks (:attr:`Task.classifier`)
also report the accuracy (:func:`accuracy`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from .images import linear_baseline, render

__all__ = [
    "Task",
    "accuracy",
    "corpus",
    "corpus_split_sizes",
    "loss",
    "make_task",
]

Batch = dict[str, Array]

# Keys of the fixed evaluation sets of the synthetic tasks: the same for every run, so
# that validation losses of different seeds and λ are comparable.
_VAL_KEY = 0x7A1
_TRAIN_EVAL_KEY = 0x7E1


@functools.cache
def _full_text() -> str:
    from pydoc_data.topics import topics

    return "".join(topics[k] for k in sorted(topics))


@functools.cache
def corpus(max_chars: int | None) -> tuple[str, np.ndarray]:
    """The characters of the char_lm vocabulary (sorted) and the corpus as their ids."""
    text = _full_text()
    if max_chars is not None:
        text = text[:max_chars]
    chars = "".join(sorted(set(text)))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = np.fromiter((lookup[c] for c in text), dtype=np.int32, count=len(text))
    return chars, ids


def corpus_split_sizes(max_chars: int | None, val_fraction: float) -> tuple[int, int]:
    """Characters in the training and held-out splits."""
    n = len(corpus(max_chars)[1])
    n_val = int(round(n * val_fraction))
    return n - n_val, n_val


@dataclass(frozen=True)
class Task:
    """One task's static description; ``vocab`` is 0 for vector tasks, ``d_in`` 0 for
    token tasks, ``d_out`` the model's output width (vocabulary or 1)."""

    kind: str
    seq_len: int  # T, positions per input sequence
    vocab: int
    d_in: int
    d_out: int
    val_size: int
    max_chars: int | None = None
    val_fraction: float = 0.1
    pairs: int = 0
    keys: int = 0
    values: int = 0
    points: int = 0
    dim: int = 0
    noise: float = 0.0
    image: int = 0  # images: side in pixels (0 for sequence tasks)
    patch: int = 0
    classes: int = 0
    train_size: int = 0
    pixel_noise: float = 0.0
    data_seed: int = 0

    @property
    def tokens(self) -> bool:
        return self.kind != "in_context_regression"

    @property
    def classifier(self) -> bool:
        """One label per input: the accuracy is reported beside the loss."""
        return self.kind == "images"

    # -- the image task's fixed data sets ----------------------------------------------

    def images(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """images: the fixed ``"train"`` (``train_size``) or ``"val"`` (``val_size``)
        images and labels, drawn from ``data_seed``."""
        n = self.train_size if split == "train" else self.val_size
        return _rendered(
            self.data_seed, split, n, self.image, self.classes, float(self.pixel_noise)
        )

    def baselines(self) -> dict[str, float]:
        """images: chance (1/classes) and the validation accuracy of multinomial
        logistic regression on the pixels, fitted to the training set
        (:func:`.images.linear_baseline`)."""
        return linear_baseline(self.images("train"), self.images("val"), self.classes)

    def train_data(self, dtype) -> Any:
        """What :meth:`sample` draws from, shared by every run: char_lm's training ids,
        the image task's training set (a batch); None for the other tasks."""
        if self.kind == "char_lm":
            return jnp.asarray(self.splits()["train"])
        if self.kind == "images":
            return _labelled(*self.images("train"), dtype)
        return None

    # -- data that does not depend on the run ------------------------------------------

    def splits(self) -> dict[str, np.ndarray]:
        """char_lm: the training and held-out id arrays; other kinds: none."""
        if self.kind != "char_lm":
            return {}
        _, ids = corpus(self.max_chars)
        n_train, _ = corpus_split_sizes(self.max_chars, self.val_fraction)
        return {"train": ids[:n_train], "val": ids[n_train:]}

    def unigram_entropy(self, split: str) -> float:
        """char_lm: the entropy of a split's character frequencies, in nats per
        character: the cross-entropy of the best prediction that ignores the context."""
        counts = np.bincount(self.splits()[split], minlength=self.vocab)
        p = counts[counts > 0] / counts.sum()
        return float(-np.sum(p * np.log(p)))

    def eval_set(self, split: str, dtype) -> Batch:
        """The fixed evaluation set of ``split`` (``"val"`` or ``"train"``): char_lm:
        up to ``val_size`` evenly spaced windows of that split; synthetic tasks:
        ``val_size`` sequences from a fixed key (the same for every run); images: the
        validation set, or the first ``val_size`` training images."""
        if self.kind == "images":
            images, labels = self.images(split)
            return _labelled(images[: self.val_size], labels[: self.val_size], dtype)
        if self.kind == "char_lm":
            ids = self.splits()[split]
            span = self.seq_len + 1
            count = min(self.val_size, len(ids) // span)
            starts = np.linspace(0, len(ids) - span, max(count, 1)).astype(np.int64)
            windows = np.stack([ids[s : s + span] for s in starts])
            return _next_token(jnp.asarray(windows), dtype)
        key = jax.random.PRNGKey(_VAL_KEY if split == "val" else _TRAIN_EVAL_KEY)
        return self.sample(key, self.val_size, {}, dtype)

    # -- sampling, inside jit ------------------------------------------------------------

    def sample(self, key: PRNGKeyArray, batch: int, data: Mapping[str, Array], dtype) -> Batch:
        """``batch`` fresh training sequences; ``data["train"]`` is char_lm's training
        split and the image task's training set (as from :meth:`train_data`)."""
        if self.kind == "images":
            train = data["train"]
            idx = jax.random.randint(key, (batch,), 0, train["targets"].shape[0])
            return jax.tree.map(lambda x: x[idx], train)
        if self.kind == "char_lm":
            ids = data["train"]
            span = self.seq_len + 1
            starts = jax.random.randint(key, (batch,), 0, ids.shape[0] - span + 1)
            windows = jax.vmap(lambda s: jax.lax.dynamic_slice(ids, (s,), (span,)))(starts)
            return _next_token(windows, dtype)
        if self.kind == "associative_recall":
            return self._recall(key, batch, dtype)
        return self._regression(key, batch, dtype)

    def _recall(self, key, batch, dtype) -> Batch:
        P = self.pairs
        k_keys, k_vals, k_query = jax.random.split(key, 3)
        keys = jax.vmap(lambda k: jax.random.permutation(k, self.keys)[:P])(
            jax.random.split(k_keys, batch)
        )
        vals = jax.random.randint(k_vals, (batch, P), 0, self.values) + self.keys
        j = jax.random.randint(k_query, (batch, 1), 0, P)
        query = jnp.take_along_axis(keys, j, axis=1)
        answer = jnp.take_along_axis(vals, j, axis=1)
        seq = jnp.reshape(jnp.stack([keys, vals], axis=-1), (batch, 2 * P))
        inputs = jnp.concatenate([seq, query], axis=1).astype(jnp.int32)
        last = _last_position(batch, 2 * P + 1)
        targets = jnp.concatenate([jnp.zeros((batch, 2 * P), jnp.int32), answer], axis=1)
        return {
            "inputs": inputs,
            "targets": targets.astype(jnp.int32),
            "weights": last.astype(dtype),
        }

    def _regression(self, key, batch, dtype) -> Batch:
        N, d = self.points, self.dim
        k_x, k_w, k_e = jax.random.split(key, 3)
        x = jax.random.normal(k_x, (batch, N, d), dtype)
        w = jax.random.normal(k_w, (batch, d), dtype) / np.sqrt(d)
        y = jnp.einsum("bnd,bd->bn", x, w)
        y = y + jnp.asarray(self.noise, dtype) * jax.random.normal(k_e, (batch, N), dtype)
        last = _last_position(batch, N).astype(dtype)
        shown = y * (1 - last)  # the query's label is hidden
        inputs = jnp.concatenate([x, shown[..., None]], axis=-1)
        return {"inputs": inputs, "targets": y * last, "weights": last}


@functools.cache
def _rendered(data_seed: int, split: str, n: int, size: int, classes: int, noise: float):
    stream = 0 if split == "train" else 1
    return render((data_seed, stream), n, size=size, classes=classes, noise=noise)


def _labelled(images, labels, dtype) -> Batch:
    n = len(labels)
    return {
        "inputs": jnp.asarray(images, dtype),
        "targets": jnp.asarray(labels, jnp.int32)[:, None],
        "weights": jnp.ones((n, 1), dtype),
    }


def _next_token(windows, dtype) -> Batch:
    inputs, targets = windows[:, :-1], windows[:, 1:]
    return {
        "inputs": inputs.astype(jnp.int32),
        "targets": targets.astype(jnp.int32),
        "weights": jnp.ones(inputs.shape, dtype),
    }


def _last_position(batch: int, T: int):
    return jnp.broadcast_to((jnp.arange(T) == T - 1)[None, :], (batch, T))


def make_task(point: Mapping[str, Any]) -> Task:
    """The :class:`Task` of a resolved attention config."""
    t = point["task"]
    kind = t["kind"]
    common = {"kind": kind, "val_size": t["val_size"]}
    if kind == "char_lm":
        chars, _ = corpus(t["max_chars"])
        return Task(
            seq_len=t["seq_len"],
            vocab=len(chars),
            d_in=0,
            d_out=len(chars),
            max_chars=t["max_chars"],
            val_fraction=t["val_fraction"],
            **common,
        )
    if kind == "associative_recall":
        vocab = t["keys"] + t["values"]
        return Task(
            seq_len=2 * t["pairs"] + 1,
            vocab=vocab,
            d_in=0,
            d_out=vocab,
            pairs=t["pairs"],
            keys=t["keys"],
            values=t["values"],
            **common,
        )
    if kind == "images":
        return Task(
            seq_len=(t["image"] // t["patch"]) ** 2,
            vocab=0,
            d_in=0,
            d_out=t["classes"],
            image=t["image"],
            patch=t["patch"],
            classes=t["classes"],
            train_size=t["train_size"],
            pixel_noise=t["pixel_noise"],
            data_seed=t["data_seed"],
            **common,
        )
    return Task(
        seq_len=t["points"],
        vocab=0,
        d_in=t["dim"] + 1,
        d_out=1,
        points=t["points"],
        dim=t["dim"],
        noise=t["noise"],
        **common,
    )


def loss(task: Task, outputs: Float[Array, "B T V"], batch: Batch) -> Float[Array, ""]:
    """The task's data loss: the weighted mean over positions of the cross-entropy
    (token tasks) or of ``½(ŷ − y)²`` (regression, ``outputs[..., 0]`` = ŷ)."""
    w = batch["weights"]
    if task.tokens:
        per = optax.softmax_cross_entropy_with_integer_labels(outputs, batch["targets"])
    else:
        per = 0.5 * (outputs[..., 0] - batch["targets"]) ** 2
    return jnp.sum(w * per) / jnp.sum(w)


def accuracy(outputs: Float[Array, "B T V"], batch: Batch) -> Float[Array, ""]:
    """The weighted fraction of positions whose largest logit is the target's."""
    w = batch["weights"]
    hit = (jnp.argmax(outputs, axis=-1) == batch["targets"]).astype(w.dtype)
    return jnp.sum(w * hit) / jnp.sum(w)
