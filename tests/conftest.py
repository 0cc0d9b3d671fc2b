"""Shared test set-up: float64 everywhere and strict rank promotion, as in diffrax."""

import jax
import numpy as np
import pytest

from rankflow.engine import programs

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


def tree_allclose(x, y, *, rtol=0.0, atol=0.0):
    """Leaf-wise ``np.allclose`` with explicit tolerances (no silent defaults)."""
    lx, tx = jax.tree_util.tree_flatten(x)
    ly, ty = jax.tree_util.tree_flatten(y)
    return tx == ty and all(
        np.shape(a) == np.shape(b) and np.allclose(a, b, rtol=rtol, atol=atol)
        for a, b in zip(lx, ly)
    )


@pytest.fixture(autouse=True, scope="module")
def _release_programs_after_each_module():
    """One process runs every test: without this its compiled executables' memory maps
    (~300 each) pass vm.max_map_count (65,530) late in the session, and XLA:CPU's
    compiler segfaults (measured: 12,600 maps at a fifth of the suite)."""
    yield
    programs.release()


@pytest.fixture
def key():
    return jax.random.PRNGKey(0)


# Long tests of the default run moved to the slow set (``pytest -m slow`` runs them): on a
# 2-core AVX2 machine (AMD EPYC, 2.45 GHz) the default run took 1,478 s, past the
# 15-minute budget, against ~590 s on the faster 2-core machine it was sized on. Each
# listed test took 8–40 s there. What stays in the default run for each: the core
# SIGKILL/resume and submitit tests, the 1-against-2-device tables of test_devices.py,
# T4 of the core engine (diagonal, sensing, custom, and its wrong-rate mutant), the
# attention family's 40 other tests, the T3/T6 formulas of test_theory.py (T6 on
# simulated runs is slow only), a mutant of each family (test_mutants.py's GD balance,
# depth, toy), the run goldens and compare_momentum's, three sims examples, the
# vmap-against-map program test.
SLOW_ON_TWO_CORES = {
    "tests/test_attention_sweep.py::test_sigkill_mid_sweep_then_resume_gives_exactly_the_uninterrupted_tables",
    "tests/test_attention_sweep.py::test_submitit_local_executor_runs_a_two_job_array_into_one_directory",
    "tests/test_results_dir.py::test_two_writers_at_once_one_is_refused_the_other_is_its_own_table",
    "tests/test_results_dir.py::test_attention_load_warns_on_a_missing_chunk",
    "tests/test_mutants.py::test_mutant_attention_rank",
    "tests/test_mutants.py::test_mutant_balancing_momentum_flow",
    "tests/test_mutants.py::test_mutant_balancing_stochastic_flow_mean",
    "tests/test_attention.py::test_T4_fails_with_qk_biases",
    "tests/test_attention.py::test_T5_one_gd_step_per_head",
    "tests/test_sweep.py::test_one_and_four_devices_give_identical_tables",
    "tests/test_sweep.py::test_compilation_cache_serves_a_new_process",
    "tests/test_mutants_noise.py::test_mutant_noise[noise.sgd_step_mean]",
    "tests/test_mutants_noise.py::test_mutant_noise[noise.t9_pathwise]",
    "tests/test_mutants_discrete.py::test_mutant_discrete[discrete.sgf_mean]",
    "tests/test_mutants_discrete.py::test_mutant_discrete[discrete.gd_order]",
    "tests/test_mutants_discrete.py::test_mutant_discrete[discrete.sgf_floor]",
    "tests/test_golden.py::test_tables_unchanged[compare-compare_sgd]",
    "tests/test_golden.py::test_tables_unchanged[compare-compare_gd]",
    "tests/test_golden.py::test_tables_unchanged[attention-balance_sgd]",
    "tests/test_pretrained_verdict.py::test_random_init_fails_in_95_of_100_seeds",
    "tests/test_dynamics.py::test_sgd_gaussian_without_noise_is_gd_and_sgf_without_noise_is_gradient_flow",
    "tests/test_dynamics.py::test_sgd_with_the_full_batch_is_gd",
    "tests/test_dynamics.py::test_same_seed_same_table_paths_differ_and_path_i_is_the_same_in_bigger_runs[dynamics1]",
    "tests/test_compare_sme.py::test_T10_sgd_against_its_sme_weak_order_one",
    "tests/test_compare.py::test_T6_sgf_and_sgd_gaussian_means_of_the_trace",
    "tests/test_vit.py::test_a_tiny_run_reports_accuracy_in_the_loss_table",
    "tests/test_inspect.py::test_memory_does_not_grow_with_the_checkpoint",
    "tests/test_simulate.py::test_T4_balance_gap_decays_exactly_under_gradient_flow[completion]",
    "tests/test_simulate.py::test_T4_balance_gap_decays_exactly_under_gradient_flow[regression]",
    "tests/test_dynamics.py::test_same_seed_same_table_paths_differ_and_path_i_is_the_same_in_bigger_runs[dynamics0]",
    "tests/test_compare.py::test_gd_compare_writes_documented_tables",
    "tests/test_batching.py::test_strategies_agree_float64",
    "tests/test_attention.py::test_T4_every_head_balances_exponentially_under_gradient_flow",
    "tests/test_attention.py::test_cli_train_writes_tables_resumes_and_compiles_once",
    "tests/test_dynamics.py::test_T6_sgf_mean_balance_trace_matches_theory_and_the_wrong_sign_fails",
    "tests/test_dynamics.py::test_sde_strong_order_shark_above_euler_maruyama",
    "tests/test_dynamics.py::test_momentum_flow_approaches_gradient_flow_like_one_over_mu",
    "tests/test_sweep.py::test_chunked_equals_unchunked_and_pads_to_one_shape",
    "tests/test_simulate.py::test_gd_table_equals_fixed_step_euler_flow_table",
    "tests/test_simulate.py::test_T3_gradient_flow_reaches_the_nuclear_norm_minimiser_on_sensing",
    "tests/test_depth.py::test_sweep_over_lambda_and_depth_compiles_once_per_depth",
    "tests/test_vit.py::test_a_short_training_run_lowers_the_loss_and_beats_chance",
    "tests/test_batching.py::test_choose_is_measured_once_and_cached",
    # 10 s of 828 in the default run of 2026-12-02; test_dynamics.py's
    # test_sweep_over_sigma_and_mu_compiles_once keeps compile-once in the default run.
    "tests/test_sweep.py::test_200_config_sweep_compiles_each_structure_once",
    *(
        f"tests/test_simulate.py::test_sims_examples_write_valid_tables[{name}]"
        for name in (
            "completion",
            "compare_gd",
            "compare_momentum",
            "custom",
            "demo",
            "diagonal_flow",
            "regression",
        )
    ),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in SLOW_ON_TWO_CORES:
            item.add_marker(pytest.mark.slow)
