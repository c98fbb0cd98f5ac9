"""The test tiers (README, "## Development"): what kind of test each test module holds,
and which tests the fast tier runs. tests/conftest.py's ``pytest_collection_modifyitems``
calls :func:`classify` on every collected test.

Every test has exactly one kind (a marker of KINDS): the kind MODULES gives its module,
or its function in a module that mixes kinds, unless the test carries a kind marker of
its own (a decorator, or ``pytest.param(..., marks=...)`` for one case). A test module missing from MODULES
stops the run (exit status 4) before any test runs, so no test escapes the tiers.

The fast tier (``python -m pytest -m fast``) is every ``unit`` test not marked ``slow``,
and a sample of the engine, differential and subprocess tests: those FAST names, and the
tests marked ``fast`` where they are defined. Its differential sample covers every policy, scheduler and step cost
of the registries (tests/test_tiers.py checks it).
"""

import itertools

import pytest

KINDS = ("unit", "engine", "differential", "subprocess")
"""The kinds of test, each a marker; pyproject.toml declares them with what each means."""

MODULES = {
    "test_benchmarks_layout": ("unit", {"subprocess": ("test_from_tests_loads_the_file_once",
                                                       "test_every_module_the_benchmarks_load_from_tests_loads_alone",
                                                       "test_the_startup_task_runs_the_one_run_sweep")}),
    "test_calibrate": "unit",
    "test_calibration_report": "unit",
    "test_forms": "unit",
    "test_replay": "unit",
    "test_validate": ("unit", {"engine": ("test_the_command_fits_replays_and_writes_its_three_files",
                                          "test_the_readme_shows_what_the_shipped_harness_runs_print",
                                          "test_the_readme_gpu_rows_are_what_the_shipped_runs_print"),
                              "subprocess": ("test_python_m_routesim_validate_bad_input_is_one_line_exit_2",)}),
    "test_simfit": ("unit", {"engine": ("test_the_fit_recovers_the_harness_hidden_roofline_from_per_request_times",)}),
    "test_capacity": ("engine", {"unit": ("test_capacity_is_the_last_rate_of_an_unbroken_run_of_passes",
                                          "test_criterion_counts_nan_as_a_failure",
                                          "test_candidates_lie_inside_the_bracket_on_the_resolution",
                                          "test_bad_options_are_one_line_and_write_nothing",
                                          "test_the_median_accepts_a_minority_of_collapsed_seeds_and_the_planner_rule_refuses",
                                          "test_the_quantile_boundary",
                                          "test_the_bootstrap_interval_against_the_exact_bootstrap",
                                          "test_a_bootstrap_end_below_the_lowest_rate_is_nan",
                                          "test_the_tables_print_the_interval_the_counts_and_each_seed")}),
    "test_chunks": ("engine", {"unit": ("test_plan_covers_every_run_once_in_order", "test_bad_workers_option",
                                        "test_scheduler_and_workers_are_exclusive",
                                        "test_a_changed_trace_file_makes_stored_chunks_stale"),
                               "subprocess": ("test_sigkill_then_resume_recomputes_only_missing_chunks",
                                              "test_large_grid_stays_within_the_memory_bound")}),
    "test_cli": ("unit", {"subprocess": ("test_subprocess",), "engine": ("test_valid_tiny_sweep_writes_one_file",)}),
    "test_closed_loop": ("differential", {"unit": ("test_bad_client_keys", "test_queue_model_refuses_the_key"),
                                          "engine": ("test_one_client_sends_after_each_completion",
                                                     "test_a_cap_no_one_reaches_is_the_open_loop",
                                                     "test_the_client_holds_at_most_n_and_exactly_n_while_requests_wait",
                                                     "test_response_time_law_with_all_requests_due_at_once",
                                                     "test_variables_appear_only_with_a_closed_loop")}),
    "test_cli_console": ("unit", {"subprocess": ("test_the_console_script_is_declared_and_installed",
                                                 "test_version_names_the_package_and_the_commit",
                                                 "test_routesim_sweep_is_python_m_routesim_sweep", "test_a_sweep_into_a_log",
                                                 "test_quiet_prints_the_tables_and_nothing_else",
                                                 "test_no_tables_with_quiet_prints_nothing",
                                                 "test_csv_holds_every_run_and_its_numbers"),
                                  "engine": ("test_quiet_trace_still_prints_its_summary",)}),
    "test_cli_out": ("unit", {"subprocess": ("test_subprocess_sweep_into_proc",),
                              "engine": ("test_trace_out_that_is_a_folder",)}),
    "test_cli_slips": ("unit", {"engine": ("test_trace_default_out_is_under_results",)}),
    "test_cluster": "subprocess",
    "test_config": "unit",
    "test_dependencies": "unit",
    "test_dtypes_policies": "unit",
    "test_engine_vs_reference": "differential",
    "test_figures": ("engine", {"unit": ("test_a_frozen_layout_fits_the_pngs_text",)}),
    "test_heaps": ("unit", {"subprocess": ("test_the_eviction_loop_compiles_without_numba_warnings",)}),
    "test_ieee_math": ("unit", {"subprocess": ("test_compiled_equals_interpreted",)}),
    "test_keys": "unit",
    "test_layout": "unit",
    "test_least_outstanding_admission": "engine",
    "test_least_outstanding_affinity": "engine",
    "test_least_outstanding_capacities": "unit",
    "test_least_outstanding_choices": "engine",
    "test_least_outstanding_cli": ("engine", {"subprocess": ("test_a_script_run_by_its_path_computes_in_its_own_process",)}),
    "test_least_outstanding_cold": "engine",
    "test_least_outstanding_counts": "engine",
    "test_least_outstanding_document": "unit",
    "test_least_outstanding_labels": "unit",
    "test_least_outstanding_example": "engine",
    "test_least_outstanding_learning": "engine",
    "test_least_outstanding_preemption": "engine",
    "test_least_outstanding_server": ("engine", {"unit": (
        "test_the_server_is_the_main_arm_and_the_page_column_says_which_verdicts_change",
        "test_the_summary_names_the_pages_replica_beside_the_server",
        "test_a_policy_that_falls_below_round_robin_is_named")}),
    "test_least_outstanding_server_claims": ("engine", {"unit": ("test_the_main_cells_read_a_claims_server_arm",
                                                                 "test_a_prediction_held_or_failed",
                                                                 "test_a_load_is_named_against_the_servers_capacity",
                                                                 "test_the_steady_state_in_brief_counts_runs_and_cells")}),
    "test_least_outstanding_retries": "engine",
    "test_least_outstanding_staleness": "engine",
    "test_least_outstanding_verdicts": "unit",
    "test_least_outstanding_workloads": ("engine", {"unit": ("test_the_column_says_when_azure_lengths_change_a_verdict",
                                                             "test_a_claim_that_cannot_run_says_why",
                                                             "test_the_loads_are_named_against_the_azure_capacity",
                                                             "test_claim5_says_when_its_cache_never_fills_on_azure_lengths")}),
    "test_machine_independence": "subprocess",
    "test_pd_engine": ("differential", {"engine": ("test_the_example_sweep_prints_the_pd_columns",
                                                   "test_the_pools_of_gpus_example")}),
    "test_pd_keys": "unit",
    "test_pd_links": "unit",
    "test_pd_reference": "unit",
    "test_plot": "engine",
    "test_pools": "unit",
    "test_provenance": ("engine", {"unit": ("test_commit_clean_dirty_and_outside_git", "test_pins_leave_the_environment_out",
                                            "test_pins_leave_a_documents_provenance_line_out",
                                            "test_made_with_names_everything_recorded"),
                                   "subprocess": ("test_the_same_environment_whatever_numpy_is_told",)}),
    "test_readme_tables": ("engine", {"unit": ("test_assert_excerpt_catches_a_changed_number",)}),
    "test_refcounts": "subprocess",
    "test_reference_selfcheck": "unit",
    "test_report": "engine",
    "test_roofline": ("differential", {"unit": ("test_roofline_keys_are_sweep_keys", "test_bad_roofline_keys_are_refused",
                                                "test_params_row_codes_the_roofline"),
                                       "subprocess": ("test_a_bad_key_exits_2_with_one_line",)}),
    "test_scale": "engine",
    "test_scheduler_modes": "engine",
    "test_disaggregation": ("unit", {"engine": ("test_a_reduced_run_gives_the_document_the_figure_and_two_findings",)}),
    "test_scripts": "engine",
    "test_simpy_model": "engine",
    "test_startup": ("subprocess", {"unit": ("test_public_names_are_the_modules_own",
                                              "test_without_dask_leaves_a_process_that_uses_xarray_alone",
                                              "test_no_routesim_code_calls_what_numbas_blas_probe_decides")}),
    "test_steady": "unit",
    "test_step_cost": ("differential", {"unit": ("test_overlap_keys_are_sweep_keys", "test_bad_overlap_keys_are_refused",
                                                 "test_each_form_compiled_is_its_formula",
                                                 "test_design_matrices_rebuild_the_formula")}),
    "test_study_folders": "engine",
    "test_summary_tables": "unit",
    "test_study": ("engine", {"subprocess": ("test_same_dataset_twice_and_with_one_or_two_threads",
                                             "test_the_engine_is_ready_once_a_run_has_gone_through_it")}),
    "test_theory": "unit",
    "test_tiers": "unit",
    "test_token_config": ("unit", {"engine": ("test_incident_features_are_accepted_and_run", "test_base_is_valid_and_runs"),
                                   "subprocess": ("test_subprocess",)}),
    "test_token_drain": "engine",
    "test_token_engine_vs_reference": "differential",
    "test_scaled_slo": ("engine", {"unit": ("test_bad_allowance_is_one_line_naming_file_and_key",
                                            "test_the_capacity_criterion_is_each_requests_own_objective",
                                            "test_slo_ms_cannot_replace_a_scaled_objective",
                                            "test_the_tables_state_the_scaled_objective")}),
    "test_conversations": ("differential", {"unit": ("test_follow_up_ids", "test_synthetic_sessions", "test_bad_conversation_keys",
                                                    "test_conversation_with_a_trace_is_refused", "test_trace_chains"),
                                           "engine": ("test_a_follow_up_is_sent_its_think_time_after_the_previous_response",),
                                           "subprocess": ("test_live_vllm_agrees_on_fresh_conversations",)}),
    "test_token_pipeline": ("engine", {"subprocess": ("test_command_line_one_or_two_threads_and_in_process",
                                                      "test_dask_cluster_gives_the_in_process_datasets")}),
    "test_token_reference": "unit",
    "test_token_timeline": ("engine", {"subprocess": ("test_incidents_sweep_runs",)}),
    "test_token_workload": "unit",
    "test_trace": "engine",
    "test_trace_replay": ("differential", {"subprocess": ("test_bad_traces_are_one_line_exit_2_nothing_written",)}),
    "test_traces": "unit",
    "test_validation": ("engine", {"unit": ("test_every_sweep_parses_and_theory_checks_run_exact",
                                            "test_checks_use_disjoint_seeds", "test_row_verdicts")}),
    "test_vllm_conformance": "unit",
    "test_vllm_decode_conformance": "unit",
    "test_vllm_engine": ("differential", {"subprocess": ("test_live_fresh_cases_are_identical",)}),
    "test_vllm_loop": ("unit", {"engine": ("test_hit_rates_as_vllm_counts_them_hand_case",
                                           "test_no_prefix_caching_queries_nothing",
                                           "test_preempted_hit_rate_is_a_vllm_variable",
                                           "test_step_cpu_time_hand_cases",
                                           "test_step_cpu_time_zero_is_the_step_cost_alone",
                                           "test_ingress_hand_cases",
                                           "test_ingress_shifts_a_lone_request")}),
    "test_vllm_private_keys": ("engine", {"unit": ("test_the_renaming_keeps_which_blocks_share_a_key",)}),
    "test_vllm_shared_keys": ("unit", {"engine": ("test_runs_sharing_a_workload_are_the_runs_alone",
                                                  "test_a_batch_makes_each_workload_s_w_once_with_room_for_two")}),
    "test_vllm_recordings": "unit",
    "test_workload": "unit",
}
"""Test module (its file name without ``.py``) -> the kind of its tests (KINDS), or
(kind, {other kind: test functions of that kind}) for a module that mixes kinds."""


FAST = {
    "test_cli": ("test_valid_tiny_sweep_writes_one_file", "test_subprocess[malformed-toml]"),
    "test_token_config": ("test_base_is_valid_and_runs",),
    "test_token_pipeline": ("test_bookkeeping_on_every_run",),
    "test_chunks": ("test_any_chunk_size_gives_the_same_datasets",),
    "test_closed_loop": ("test_one_client_sends_after_each_completion",),
}
"""The fast tier's sample of existing engine and subprocess tests: test module -> its
tests (a function, all its cases, or one case by its test id) that the fast tier runs:
each model's pipeline through the command line in process, chunking, a closed loop,
and one ``python -m routesim.sweep`` process. (The differential samples are tests of
their own, marked ``fast`` where they are defined.)"""


def module_kinds(module: str) -> tuple[str, dict]:
    """(the module's kind, {test function: its own kind}) from MODULES."""
    entry = MODULES[module]
    kind, others = (entry, {}) if isinstance(entry, str) else entry
    return kind, {name: k for k, names in others.items() for name in names}


def kind_of(item) -> str:
    """The kind of a collected test: its own kind marker, else its module's (MODULES).
    Raises pytest.UsageError for a module not in MODULES or a test of two kinds."""
    own = {m.name for m in item.iter_markers() if m.name in KINDS}
    if len(own) > 1:
        raise pytest.UsageError(f"{item.nodeid}: marked {' and '.join(sorted(own))}; a test has one kind "
                                f"of {', '.join(KINDS)}")
    if own:
        return own.pop()
    module = item.path.stem
    if module not in MODULES:
        raise pytest.UsageError(f"{item.path.name} is not in tests/tiers.py's MODULES: give it a kind "
                                f"({', '.join(KINDS)})")
    kind, tests = module_kinds(module)
    return tests.get(item.originalname, kind)


def classify(items) -> None:
    """Add each test's kind marker and, for the fast tier, ``fast`` (module docstring)."""
    for item in items:
        kind = kind_of(item)
        if not item.get_closest_marker(kind):
            item.add_marker(kind)
        names = {m.name for m in item.iter_markers()}
        if "fast" in names and "slow" in names:
            raise pytest.UsageError(f"{item.nodeid}: marked both fast and slow")
        picked = FAST.get(item.path.stem, ())
        if (kind == "unit" and "slow" not in names) or item.originalname in picked or item.name in picked:
            item.add_marker("fast")


def fast_params(function) -> list[dict]:
    """The cases of a parametrized test function that the fast tier runs, each as
    {argument: value}: every case if the function is marked ``fast``, else those with a
    ``pytest.param(..., marks=pytest.mark.fast)`` in one of its parametrizations (the
    cases are the product of its ``parametrize`` decorators, as pytest makes them)."""
    marks = getattr(function, "pytestmark", [])
    whole = any(m.name == "fast" for m in marks)
    axes = []
    for m in marks:
        if m.name != "parametrize":
            continue
        names = m.args[0].split(",") if isinstance(m.args[0], str) else list(m.args[0])
        names = [n.strip() for n in names]
        axis = []
        for value in m.args[1]:
            values, fast = (value.values, any(x.name == "fast" for x in value.marks)) \
                if isinstance(value, type(pytest.param(None))) else ((value,) if len(names) == 1 else value, False)
            axis.append((dict(zip(names, values, strict=True)), fast))
        axes.append(axis)
    out = []
    for combo in itertools.product(*axes):
        if whole or any(fast for _, fast in combo):
            out.append({k: v for case, _ in combo for k, v in case.items()})
    return out
