# ruff: noqa: F401
"""The exact predictions of docs/theory.md, one place per result.

Everything here is a pure, jittable function of ``jax.numpy`` arrays that keeps the
dtype of its main array argument (scalars ``eta``, ``lam``, ``t`` … are cast to it),
except the rate fitting of T8, which is numpy post-processing of results tables, and
T14's measurements of Muon's ρ (:func:`muon_rho`, :func:`newton_schulz_sup`).
Time ``t`` is in optimizer steps: every flow carries the learning rate η inside, so one
GD step is one Euler step of size 1 (docs/theory.md, "Setting and conventions").

Where each item of docs/theory.md lives:

- setting: :func:`balance` (``D = AᵀA − BᵀB``), :func:`l2_penalty`
  (``½(‖A‖_F² + ‖B‖_F²)``), :func:`nuclear_norm` (``‖W‖_*``).
- T1, ``½(‖A‖² + ‖B‖²) − ‖ABᵀ‖_* ≥ 0``, zero iff balanced: :func:`t1_gap`.
- T2, ``t1_gap ≤ ½‖AᵀA − BᵀB‖_*``: :func:`t2_bound`.
- T3, the minimiser of ``L(W) + λ‖W‖_*`` for convex L: :func:`svt`,
  :func:`prox_gradient`, :func:`nuclear_minimiser`, :func:`lipschitz_constant`; the
  plain-L2 contrast: :func:`quadratic_form`, :func:`ridge_minimisers`.
- T4, GF: ``D(t) = e^{−2ηλt} D(0)`` and ``L_L2 − L_* ≤ (λ/2)e^{−2ηλt}‖D(0)‖_*``:
  :func:`gf_balance`, :func:`gf_balance_gap`, :func:`gf_loss_gap_bound`,
  :func:`gf_contraction`, :func:`gf_balance_rate`.
- T5, GD: ``D_{k+1} = (1−ηλ)² D_k + η²(BᵀGᵀGB − AᵀGGᵀA)``: :func:`gd_balance_step`,
  :func:`gd_contraction`, :func:`gd_balance_rate`; the late rate near a balanced
  minimum: :func:`gd_rate_bracket`.
- T4 and T5 under a learning-rate schedule (``D(t) = e^{−2λ∫η}D(0)``; T5 with η_k):
  :func:`gf_balance_scheduled` (D or any norm of it),
  :func:`scheduled_balance_exponent`, :func:`gd_scheduled_contraction` (with
  :func:`gd_scheduled_etas`, optax's η_k) and the bound its η² terms put on the measured
  decay, :func:`gd_scheduled_bracket`; per-factor
  learning-rate multipliers (``d/dt(AᵀA/c_A − BᵀB/c_B) = −2ηλD``):
  :func:`scaled_balance`, :func:`scaled_balance_rate`.
- T6, SGF: ``E[D(t)]`` in closed form: :func:`sgf_mean_balance`,
  :func:`sgf_mean_balance_trace`; the stationary ``E‖D‖_F²``: :func:`sgf_floor`.
- T7, decoupled momentum flow, ``dD/dt`` and ``dE/dt``: :func:`momentum_balance_rates`;
  the late rate near a balanced minimum: :func:`momentum_orbit_rate`.
- T8, rates and orders measured from simulations: :func:`fit_rate`,
  :func:`convergence_order`.
- T9, gradient-space noise ``G + ξ``: the pathwise drift
  ``dD/dt = −2ηλD + η²σ²(m BᵀB − n AᵀA)``: :func:`gradient_noise_balance_drift`; at
  m = n ``D(t) = e^{−(2ηλ + η²σ²m)t} D(0)``: :func:`gradient_noise_balance`; the mean
  one-step GD update with ``G + ξ``: :func:`gradient_noise_step_mean`.
- T10, minibatch noise: the SME's drift ``−2ηλD + (η²/(bN)) Σ_k (Bᵀδ_kᵀδ_kB −
  Aᵀδ_kδ_kᵀA)``: :func:`minibatch_noise_balance_drift`; the mean one-step minibatch SGD
  update: :func:`minibatch_step_mean`; sampling without replacement's
  ``(N − b)/(N − 1)``: :func:`without_replacement_factor`; the stationary mean balance
  of minibatch SGD (T10 floor), ``E[D] = η(BᵀḠᵀḠB − AᵀḠḠᵀA + s²M)/(λ(2 − ηλ))``
  (≈ ``η s² M/(2λ)``, ``M = Σ_k (Bᵀδ_kᵀδ_kB − Aᵀδ_kδ_kᵀA)``, ``s² = (N − b)/((N − 1)bN)``
  without replacement): :func:`minibatch_balance_floor`.
- T12, depth L (``W = W_L ⋯ W_1``, ``W_j`` of shape ``d_j × d_{j−1}``; depth 2 is
  ``(W_1, W_2) = (Bᵀ, A)``: :func:`pair_to_factors`, :func:`product`): the pairwise
  balances ``D_j = W_{j+1}ᵀW_{j+1} − W_jW_jᵀ``: :func:`depth_balances`; GF's
  ``D_j(t) = e^{−2ηλt}D_j(0)``: :func:`gf_depth_balance`; GD's exact
  ``D_j′ = (1−ηλ)²D_j + η²(∇_{j+1}ᵀ∇_{j+1} − ∇_j∇_jᵀ)``: :func:`gd_depth_balance_step`,
  with the factor gradients of the chain rule: :func:`depth_gradients`.
- T13, the Schatten-2/L quasi-norm: ``½Σ‖W_j‖² ≥ (L/2)Σσ_i^{2/L}``, equal iff balanced:
  :func:`depth_l2_penalty`, :func:`schatten_penalty`, :func:`depth_penalty_gap`,
  :func:`balanced_factors`; the scalar problem ``min_{w≥0} ½(w−s)² + (λL/2)w^{2/L}``:
  :func:`schatten_scalar_objective`, :func:`schatten_scalar_stationarity`,
  :func:`schatten_scalar_minimiser`, and its jump threshold :func:`schatten_threshold`.
- T14, decoupled decay with a bounded update, ``X_{k+1} = (1−ηλ)X_k − ηU_k``,
  ``‖U_k‖ ≤ ρ``: ``‖X_k‖ ≤ ρ/λ + (1−ηλ)^k(‖X_0‖ − ρ/λ)``: :func:`t14_bound`; the norms
  (max for sign descent and Lion, spectral for Muon): :func:`update_norm`; Muon's ρ,
  measured on optax's muon: :func:`muon_rho`, bounded by :func:`newton_schulz_sup`
  (both numpy measurements, not jittable); the balance under such updates,
  ``D′ = (1−ηλ)²D − η(1−ηλ)(AᵀU_A + U_AᵀA − BᵀU_B − U_BᵀB) + η²(U_AᵀU_A − U_BᵀU_B)``:
  :func:`balance_step`.
"""

from __future__ import annotations

from ._balance import MomentumBalanceRates as MomentumBalanceRates
from ._balance import gd_balance_rate as gd_balance_rate
from ._balance import gd_balance_step as gd_balance_step
from ._balance import gd_contraction as gd_contraction
from ._balance import gd_rate_bracket as gd_rate_bracket
from ._balance import gf_balance as gf_balance
from ._balance import gf_balance_gap as gf_balance_gap
from ._balance import gf_balance_rate as gf_balance_rate
from ._balance import gf_contraction as gf_contraction
from ._balance import gf_loss_gap_bound as gf_loss_gap_bound
from ._balance import momentum_balance_rates as momentum_balance_rates
from ._balance import momentum_orbit_rate as momentum_orbit_rate
from ._balance import sgf_floor as sgf_floor
from ._balance import sgf_mean_balance as sgf_mean_balance
from ._balance import sgf_mean_balance_trace as sgf_mean_balance_trace
from ._common import balance as balance
from ._common import l2_penalty as l2_penalty
from ._common import nuclear_norm as nuclear_norm
from ._depth import ScalarThreshold as ScalarThreshold
from ._depth import balanced_factors as balanced_factors
from ._depth import depth_balances as depth_balances
from ._depth import depth_gradients as depth_gradients
from ._depth import depth_l2_penalty as depth_l2_penalty
from ._depth import depth_penalty_gap as depth_penalty_gap
from ._depth import gd_depth_balance_step as gd_depth_balance_step
from ._depth import gf_depth_balance as gf_depth_balance
from ._depth import pair_to_factors as pair_to_factors
from ._depth import product as product
from ._depth import schatten_penalty as schatten_penalty
from ._depth import schatten_scalar_minimiser as schatten_scalar_minimiser
from ._depth import schatten_scalar_objective as schatten_scalar_objective
from ._depth import schatten_scalar_stationarity as schatten_scalar_stationarity
from ._depth import schatten_threshold as schatten_threshold
from ._fit import convergence_order as convergence_order
from ._fit import fit_rate as fit_rate
from ._geometry import balance_step as balance_step
from ._geometry import muon_rho as muon_rho
from ._geometry import newton_schulz_sup as newton_schulz_sup
from ._geometry import t14_bound as t14_bound
from ._geometry import update_norm as update_norm
from ._noise import gradient_noise_balance as gradient_noise_balance
from ._noise import gradient_noise_balance_drift as gradient_noise_balance_drift
from ._noise import gradient_noise_step_mean as gradient_noise_step_mean
from ._noise import minibatch_balance_floor as minibatch_balance_floor
from ._noise import minibatch_noise_balance_drift as minibatch_noise_balance_drift
from ._noise import minibatch_step_mean as minibatch_step_mean
from ._noise import without_replacement_factor as without_replacement_factor
from ._nuclear import ProxGradientResult as ProxGradientResult
from ._nuclear import lipschitz_constant as lipschitz_constant
from ._nuclear import nuclear_minimiser as nuclear_minimiser
from ._nuclear import prox_gradient as prox_gradient
from ._nuclear import quadratic_form as quadratic_form
from ._nuclear import ridge_minimisers as ridge_minimisers
from ._nuclear import svt as svt
from ._nuclear import t1_gap as t1_gap
from ._nuclear import t2_bound as t2_bound
from ._schedule import gd_scheduled_bracket as gd_scheduled_bracket
from ._schedule import gd_scheduled_contraction as gd_scheduled_contraction
from ._schedule import gd_scheduled_etas as gd_scheduled_etas
from ._schedule import gf_balance_scheduled as gf_balance_scheduled
from ._schedule import scaled_balance as scaled_balance
from ._schedule import scaled_balance_rate as scaled_balance_rate
from ._schedule import scheduled_balance_exponent as scheduled_balance_exponent

__all__ = [
    "balance_step",
    "muon_rho",
    "newton_schulz_sup",
    "t14_bound",
    "update_norm",
    "ScalarThreshold",
    "balanced_factors",
    "depth_balances",
    "depth_gradients",
    "depth_l2_penalty",
    "depth_penalty_gap",
    "gd_depth_balance_step",
    "gf_depth_balance",
    "pair_to_factors",
    "product",
    "schatten_penalty",
    "schatten_scalar_minimiser",
    "schatten_scalar_objective",
    "schatten_scalar_stationarity",
    "schatten_threshold",
    "gd_scheduled_bracket",
    "gd_scheduled_contraction",
    "gd_scheduled_etas",
    "gf_balance_scheduled",
    "scaled_balance",
    "scaled_balance_rate",
    "scheduled_balance_exponent",
    "MomentumBalanceRates",
    "ProxGradientResult",
    "balance",
    "convergence_order",
    "fit_rate",
    "gd_balance_rate",
    "gd_balance_step",
    "gd_contraction",
    "gd_rate_bracket",
    "gf_balance",
    "gf_balance_gap",
    "gf_balance_rate",
    "gf_contraction",
    "gf_loss_gap_bound",
    "gradient_noise_balance",
    "gradient_noise_balance_drift",
    "gradient_noise_step_mean",
    "l2_penalty",
    "lipschitz_constant",
    "minibatch_balance_floor",
    "minibatch_noise_balance_drift",
    "minibatch_step_mean",
    "momentum_balance_rates",
    "momentum_orbit_rate",
    "nuclear_minimiser",
    "nuclear_norm",
    "prox_gradient",
    "quadratic_form",
    "ridge_minimisers",
    "sgf_floor",
    "sgf_mean_balance",
    "sgf_mean_balance_trace",
    "svt",
    "t1_gap",
    "t2_bound",
    "without_replacement_factor",
]
