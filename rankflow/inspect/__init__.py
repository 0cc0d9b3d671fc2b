"""Inspect pretrained checkpoints for the fingerprints of weight decay.

Weight decay on the two factors of a product balances them (docs/theory.md, T1, T4): for
attention, head by head, ``W_Q^hᵀW_Q^h ≈ W_K^hᵀW_K^h`` (key–query) and
``W_V^hᵀW_V^h ≈ W_O^h W_O^hᵀ`` (value–output). This package measures that on a
safetensors checkpoint (BERT/RoBERTa/MiniLM, GPT-2, Llama/Mistral/Qwen with
grouped-query attention and rotary embeddings, ViT), one layer at a time with numpy,
against a null pairing of factors from different heads.

    from rankflow.inspect import inspect_checkpoint
    res = inspect_checkpoint("path/to/model", out="out/inspect")   # rankflow inspect
    res.heads          # one row per (layer, pair, head or group)

Modules: ``_checkpoint`` (files, headers, per-layer reads), ``_layout`` (the head layout,
tensor names), ``_detect`` (inferring the layout), ``_families`` (per-head factors),
``_stats`` (statistics of one pair), ``_layer`` (one layer: its units, null pairing, rows
and pair gaps), ``_run`` (the loop and outputs), ``_summary`` (the rows theory predicts,
layout notes, ``summary.md``), ``_permutation`` (the layer-stratified permutation test
over head pairings),
``_correlation`` (the second test per pair: the off-diagonal Gram correlation against the
same null pairings), ``_random_init`` (the false-positive rate on random initialisations),
``_findings`` (graded findings, the effect's bootstrap interval), ``_findings_text``
(their text), ``_reference`` (the training reference shipped with the package),
``_spectra`` (singular-value spectra with a Marchenko–Pastur noise edge, spikes, power-law
α), ``_spectra_layers`` (those per head and layer), ``_series`` (checkpoints across
training: the decay of each head's gap against the step, against T5/T4's prediction),
``_sources`` (a series' checkpoints and steps), ``_rates`` (its fitted decay rates),
``_lr`` (a series' learning rate and the exponents it predicts), ``_hub`` (Hugging Face
repo ids → the local cache), ``_archive`` (file kinds by magic bytes; a zipped model
folder read through a temporary folder), ``_torchbin`` (PyTorch ``.bin`` through torch,
optional).
"""

from . import _series
from ._archive import archive_error as archive_error
from ._archive import file_kind as file_kind
from ._archive import unpacked as unpacked
from ._checkpoint import Checkpoint as Checkpoint
from ._checkpoint import InspectError as InspectError
from ._checkpoint import open_checkpoint as open_checkpoint
from ._correlation import CORR_FINDINGS as CORR_FINDINGS
from ._correlation import CorrTest as CorrTest
from ._correlation import corr_finding as corr_finding
from ._correlation import corr_interval as corr_interval
from ._correlation import corr_test as corr_test
from ._correlation import holm as holm
from ._families import ARCHS as ARCHS
from ._families import LayerWeights as LayerWeights
from ._families import Layout as Layout
from ._families import canonical as canonical
from ._families import infer_layout as infer_layout
from ._families import layer_tensor_names as layer_tensor_names
from ._findings import ALPHA as ALPHA
from ._findings import FINDINGS as FINDINGS
from ._findings import FP_MAX as FP_MAX
from ._findings import FP_SEEDS as FP_SEEDS
from ._findings import MARGIN as MARGIN
from ._findings import N_PERM as N_PERM
from ._findings import PERM_SEED as PERM_SEED
from ._findings import balance_findings as balance_findings
from ._findings import effect_interval as effect_interval
from ._findings import false_positives as false_positives
from ._findings import grade as grade
from ._findings_text import findings_text as findings_text
from ._hub import hub_cache as hub_cache
from ._hub import locate as locate
from ._hub import resolve_repo as resolve_repo
from ._layer import inspect_layer as inspect_layer
from ._lr import predicted_exponents as predicted_exponents
from ._lr import read_lr_schedule as read_lr_schedule
from ._permutation import PermutationTest as PermutationTest
from ._permutation import null_statistics as null_statistics
from ._permutation import pairwise_corr_offdiag as pairwise_corr_offdiag
from ._permutation import pairwise_gap_rel as pairwise_gap_rel
from ._permutation import passes as passes
from ._permutation import permutation_test as permutation_test
from ._permutation import unit_statistics as unit_statistics
from ._random_init import FalsePositives as FalsePositives
from ._random_init import UnitShape as UnitShape
from ._random_init import false_positive_rate as false_positive_rate
from ._random_init import random_init_gaps as random_init_gaps
from ._random_init import unit_shapes as unit_shapes
from ._random_init import wishart_grams as wishart_grams
from ._reference import REFERENCE_COLUMNS as REFERENCE_COLUMNS
from ._reference import reference_meta as reference_meta
from ._reference import reference_table as reference_table
from ._reference import reference_text as reference_text
from ._run import ID_COLUMNS as ID_COLUMNS
from ._run import Inspection as Inspection
from ._run import inspect_checkpoint as inspect_checkpoint
from ._run import load_inspection as load_inspection
from ._run import parse_layers as parse_layers
from ._series import SeriesInspection as SeriesInspection
from ._series import fit_series as fit_series
from ._series import inspect_series as inspect_series
from ._series import is_series as is_series
from ._series import load_series as load_series
from ._series import series_sources as series_sources
from ._spectra import SPECTRUM_COLUMNS as SPECTRUM_COLUMNS
from ._spectra import matrix_spectrum as matrix_spectrum
from ._spectra import noise_sigma as noise_sigma
from ._spectra import powerlaw_fit as powerlaw_fit
from ._spectra import product_spectrum as product_spectrum
from ._spectra_layers import inspect_spectra as inspect_spectra
from ._spectra_layers import layer_spectra as layer_spectra
from ._spectra_layers import with_spectra as with_spectra
from ._stats import STATISTICS as STATISTICS
from ._stats import Factor as Factor
from ._stats import pair_statistics as pair_statistics
from ._summary import PAIRS as PAIRS
from ._summary import theory_rows as theory_rows

__all__ = [
    "ALPHA",
    "FINDINGS",
    "FP_MAX",
    "FP_SEEDS",
    "ID_COLUMNS",
    "MARGIN",
    "N_PERM",
    "PERM_SEED",
    "REFERENCE_COLUMNS",
    "balance_findings",
    "effect_interval",
    "false_positives",
    "findings_text",
    "grade",
    "reference_meta",
    "reference_table",
    "reference_text",
    "hub_cache",
    "resolve_repo",
    "ARCHS",
    "PAIRS",
    "SPECTRUM_COLUMNS",
    "STATISTICS",
    "Checkpoint",
    "Factor",
    "FalsePositives",
    "InspectError",
    "Inspection",
    "LayerWeights",
    "Layout",
    "PermutationTest",
    "UnitShape",
    "canonical",
    "false_positive_rate",
    "infer_layout",
    "inspect_checkpoint",
    "inspect_layer",
    "layer_tensor_names",
    "load_inspection",
    "open_checkpoint",
    "pair_statistics",
    "pairwise_gap_rel",
    "parse_layers",
    "passes",
    "permutation_test",
    "random_init_gaps",
    "theory_rows",
    "unit_shapes",
    "unit_statistics",
    "wishart_grams",
    "inspect_spectra",
    "layer_spectra",
    "matrix_spectrum",
    "noise_sigma",
    "powerlaw_fit",
    "product_spectrum",
    "with_spectra",
]
__all__ += ["predicted_exponents", "read_lr_schedule"]  # the series' learning rate (._lr)
__all__ += _series.__all__  # the series API, re-exported above
# The Gram-correlation test (._correlation), the null pairings it shares with the gap
# test, file kinds and zipped folders (._archive).
__all__ += ["CORR_FINDINGS", "CorrTest", "corr_finding", "corr_interval", "corr_test"]
__all__ += ["holm", "null_statistics", "pairwise_corr_offdiag"]
__all__ += ["archive_error", "file_kind", "unpacked"]
