"""The ``[pools]`` keys of prefill/decode disaggregation (issue 42, docs/model.md
"Prefill/decode disaggregation"): every bad value refused with one line naming the file
and the key (exit 2, nothing written), a co-located stage unchanged, a well-formed pool
accepted, and what the engine does not simulate with pools yet refused."""

import pytest

import routesim
from routesim.batching import pd_keys
from routesim.batching.params import TOKEN_PARAM, unused_params
from test_token_config import BASE, SLOW_EVENT, assert_refused, bad, edit, run_cli  # noqa: F401 (run_cli: a fixture)

SIGNALS = "[signals]"
"""BASE's cluster has 3 replicas (``uniform = [1, 1, 1]``)."""


def pools(body: str) -> tuple:
    """The edit that adds a ``[pools]`` table with ``body`` before BASE's [signals]."""
    return (SIGNALS, f"[pools]\n{body}\n\n{SIGNALS}")


BAD = [
    bad("unknown-key", "pools.prefil", "did you mean 'prefill'", pools("prefil = 1")),
    bad("unknown-link-leaf", "pools.link.bandwith_gb_s", "did you mean 'bandwidth_gb_s'",
        pools("prefill = 1\ndecode = 2\nlink = { bandwith_gb_s = 10 }")),
    bad("negative-prefill", "pools.prefill", "must be >= 0", pools("prefill = -1")),
    bad("fraction-decode", "pools.decode", "whole number", pools("prefill = 1\ndecode = 1.5")),
    bad("unknown-route", "pools.route", "unknown value 'greedy'", pools('prefill = 1\ndecode = 2\nroute = "greedy"')),
    bad("unknown-prefill-policy", "pools.prefill_policy", "unknown value 'least_latency'",
        pools('prefill = 1\ndecode = 2\nprefill_policy = "least_latency"')),
    bad("queue-decode-policy", "pools.decode_policy", "unknown value 'adaptive'",
        pools('prefill = 1\ndecode = 2\ndecode_policy = "adaptive"')),
    bad("negative-threshold", "pools.threshold_tokens", "must be >= 0",
        pools('prefill = 1\ndecode = 2\nroute = "selective"\nthreshold_tokens = -4')),
    bad("negative-token-ms", "pools.token_ms", "must be >= 0",
        pools('prefill = 1\ndecode = 2\nroute = "transfer_aware"\ntoken_ms = -1')),
    bad("zero-lease", "pools.lease_ms", "must be > 0", pools("prefill = 1\ndecode = 2\nlease_ms = 0")),
    bad("negative-latency", "pools.link.latency_ms", "must be >= 0",
        pools("prefill = 1\ndecode = 2\nlink = { latency_ms = -0.5 }")),
    bad("zero-bandwidth", "pools.link.bandwidth_gb_s", "must be > 0",
        pools("prefill = 1\ndecode = 2\nlink = { bandwidth_gb_s = 0 }")),
    bad("zero-kv-bytes", "pools.link.kv_bytes_per_token", "must be >= 1",
        pools("prefill = 1\ndecode = 2\nlink = { kv_bytes_per_token = 0 }")),
    # bounds between keys and against the cluster
    bad("decode-without-prefill", "pools.decode", "no prefill pool", pools("decode = 3")),
    bad("link-without-prefill", "pools.link.latency_ms", "no prefill pool", pools("link = { latency_ms = 2 }")),
    bad("prefill-without-decode", "pools.decode", "must both be at least 1", pools("prefill = 3")),
    bad("pools-over-cluster", "pools.decode", "add up to the cluster's 3 replicas", pools("prefill = 2\ndecode = 2")),
    bad("threshold-not-selective", "pools.threshold_tokens", "only with route = 'selective'",
        pools("prefill = 1\ndecode = 2\nthreshold_tokens = 100")),
    bad("token-ms-not-transfer-aware", "pools.token_ms", "only with route = 'transfer_aware'",
        pools('prefill = 1\ndecode = 2\nroute = "selective"\ntoken_ms = 0.02')),
    bad("stage-pool-over-cluster", "stages[0].decode_replicas", "add up to the cluster's 3 replicas",
        pools("prefill = 1\ndecode = 2"), ('name = "policies"', 'name = "policies"\ndecode_replicas = 1')),
    bad("vllm-mode", "pools.prefill", 'need scheduler = "reserve"', pools("prefill = 1\ndecode = 2"),
        ("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"')),
]

TWO = "prefill = 1\ndecode = 2"
"""A prefill pool of one replica and a decode pool of two (BASE's cluster of 3)."""
BAD += [
    # each pool's own replica settings ([pools.prefill_replica], [pools.decode_replica])
    bad("pool-table-co-located", "pools.decode_replica.kv_blocks", "no prefill pool",
        pools("prefill = 0\n\n[pools.decode_replica]\nkv_blocks = 500")),
    bad("pool-key-in-a-co-located-stage", "stages[0].decode_max_batch", "no prefill pool",
        ('name = "policies"', 'name = "policies"\ndecode_max_batch = 4')),
    bad("pool-key-wrong-type", "pools.prefill_replica.chunked_prefill", "expected true or false",
        pools(TWO + '\n\n[pools.prefill_replica]\nchunked_prefill = "no"')),
    bad("pool-key-fraction", "pools.decode_replica.max_batch", "whole number",
        pools(TWO + "\n\n[pools.decode_replica]\nmax_batch = 2.5")),
    bad("pool-key-negative", "pools.prefill_replica.step_cpu_ms", "must be >= 0",
        pools(TWO + "\n\n[pools.prefill_replica]\nstep_cpu_ms = -1")),
    bad("pool-unknown-form", "pools.prefill_replica.step_cost", "unknown value 'flat'",
        pools(TWO + '\n\n[pools.prefill_replica]\nstep_cost = "flat"')),
    bad("pool-unknown-key", "pools.decode_replica.block_tokens", "unknown key",  # shared: [replica]'s only
        pools(TWO + "\n\n[pools.decode_replica]\nblock_tokens = 32")),
    bad("pool-unknown-table", "pools.decode_replicas", "unknown key",
        pools(TWO + "\n\n[pools.decode_replicas]\nkv_blocks = 500")),
    bad("pool-unknown-coefficient", "pools.prefill_replica.roofline_ms.kappa", "unknown key",
        pools(TWO + '\n\n[pools.prefill_replica]\nstep_cost = "roofline"\nroofline_ms = { kappa = 1 }')),
    bad("pool-coefficient-of-another-form", "pools.decode_replica.roofline_ms.base",
        "the decode pool's step_cost is 'linear'",
        pools(TWO + "\n\n[pools.decode_replica]\nroofline_ms = { base = 2 }")),
    bad("pool-coefficient-of-the-replica-form", "pools.prefill_replica.step_ms.base",
        "the prefill pool's step_cost is 'roofline'",
        pools(TWO + '\n\n[pools.prefill_replica]\nstep_cost = "roofline"\nstep_ms = { base = 2 }')),
    bad("pool-kv-too-small", "pools.decode_replica.kv_blocks", "could never fit in a KV pool of 4848 tokens",
        pools(TWO + "\n\n[pools.decode_replica]\nkv_blocks = 303")),
    # link.model: calibrate's model description instead of kv_bytes_per_token
    bad("kv-model-and-bytes", "pools.link.model", "not both",
        pools(TWO + '\nlink = { model = "m.toml", kv_bytes_per_token = 1000 }')),
    bad("kv-model-missing", "pools.link.model", "nothing.toml: file: cannot read",
        pools(TWO + '\nlink = { model = "nothing.toml" }')),
    bad("kv-model-not-a-string", "pools.link.model", "expected a string", pools(TWO + "\nlink = { model = 8 }")),
    bad("kv-model-co-located", "pools.link.model", "no prefill pool", pools('link = { model = "m.toml" }')),
]

WELL_FORMED = pools(
    'prefill = 1\ndecode = 2\nroute = "selective"\nthreshold_tokens = 512\nprefill_policy = "least_tokens"\n'
    'decode_policy = "least_kv"\nlease_ms = 1000\nlink = { latency_ms = 0.5, bandwidth_gb_s = 25, '
    'kv_bytes_per_token = 65536 }')
"""A well-formed pool (every key given), which the engine simulates."""


@pytest.mark.parametrize("text,key,fragment", BAD)
def test_bad_pools_keys(tmp_path, run_cli, text, key, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


def test_a_well_formed_pool_is_accepted():
    """Every [pools] key given, with scheduler = "reserve": the stage parses with its
    values (the engine simulates it: tests/test_pd_engine.py)."""
    stage = routesim.parse_sweep(edit(WELL_FORMED), "ok.toml").stages[0]
    v = stage.values
    assert (v["prefill_replicas"], v["decode_replicas"], v["pair_route"]) == ((1,), (2,), ("selective",))
    assert (v["threshold_tokens"], v["link_bandwidth_gb_s"], v["kv_bytes_per_token"]) == ((512,), (25.0,), (65536,))


def test_crashes_and_deadlines_with_pools_are_accepted():
    """Crash events (of a prefill and a decode replica), a timeout and a first-token
    deadline with pools parse: the engine simulates them (tests/test_pd_engine.py's
    failure cases), where it refused them before."""
    text = edit(pools("prefill = 1\ndecode = 2\nlease_ms = 500\n\n[client]\ntimeout_ms = 5000\n"
                      "ttft_timeout_ms = 300"),
                (SLOW_EVENT, SLOW_EVENT + ", { at_s = 2.5, replica = 1, fail = true }, "
                             "{ at_s = 2.6, replica = 3, fail = true }"))
    stage = routesim.parse_sweep(text, "ok.toml").stages[0]
    assert (stage.values["timeout_ms"], stage.values["ttft_timeout_ms"]) == ((5000.0,), (300.0,))
    assert stage.values["prefill_replicas"] == (1,)


def test_the_client_the_front_door_the_ingress_and_black_holes_with_pools_are_accepted():
    """``[workload] max_in_flight``, ``[router] admission``, ``[replica] ingress_ms`` and
    ``ingress_ms_per_token``, and a ``fail_fast`` event with pools parse (the engine
    simulates them with pairs: tests/test_pd_engine.py's closed-loop, front-door, ingress
    and black-hole cases), where they were refused."""
    text = edit(pools("prefill = 1\ndecode = 2"), ("p_long = 0.02", "p_long = 0.02\nmax_in_flight = 4"))
    stage = routesim.parse_sweep(text, "ok.toml").stages[0]
    assert stage.values["max_in_flight"] == (4,) and stage.values["prefill_replicas"] == (1,)
    text = edit(pools('prefill = 1\ndecode = 2\n\n[router]\nadmission = { max_tokens = 9000, mode = "queue" }'))
    stage = routesim.parse_sweep(text, "ok.toml").stages[0]
    assert stage.values["admission_max_tokens"] == (9000.0,) and stage.values["admission_mode"] == ("queue",)
    text = edit(pools("prefill = 1\ndecode = 2"),
                ("chunked_prefill = true", "chunked_prefill = true\ningress_ms = 2\ningress_ms_per_token = 0.01"),
                (SLOW_EVENT, SLOW_EVENT + ", { at_s = 2.5, replica = 1, fail_fast = true }"))
    stage = routesim.parse_sweep(text, "ok.toml").stages[0]
    assert (stage.values["ingress_ms"], stage.values["ingress_ms_per_token"]) == ((2.0,), (0.01,))
    assert stage.values["prefill_replicas"] == (1,)


def test_co_located_pools_are_accepted_and_leave_the_attributes_alone():
    """``prefill = 0`` (said or not) is the co-located cluster: the stage parses, and
    no [pools] key is among the parameters its Dataset records."""
    for text in (BASE, edit(pools("prefill = 0"))):
        stage = routesim.parse_sweep(text, "ok.toml").stages[0]
        assert stage.values["prefill_replicas"] == (0,)
        assert set(pd_keys.NAMES) <= unused_params(stage.values)


def test_defaults_are_the_design_pages():
    """The defaults docs/model.md states: Llama-3.1-8B's KV bytes per token in 16 bits
    (32 layers, 8 KV heads of 128, 2 bytes, K and V), a 50 GB/s link, 1 ms latency,
    vLLM's 30 s lease, independent selection by the run's policy."""
    assert TOKEN_PARAM["kv_bytes_per_token"].default == 131072 == 2 * 32 * 8 * 128 * 2
    assert TOKEN_PARAM["link_bandwidth_gb_s"].default == 50.0
    assert TOKEN_PARAM["link_latency_ms"].default == 1.0
    assert TOKEN_PARAM["lease_ms"].default == 30000.0
    assert (TOKEN_PARAM["pair_route"].default, TOKEN_PARAM["prefill_policy"].default,
            TOKEN_PARAM["decode_policy"].default) == ("independent", "same", "same")
    assert TOKEN_PARAM["prefill_replicas"].default == 0


# ------------------------------------------------------------ the kernel's parameters
def test_the_pools_keys_reach_the_kernel_record():
    """params_row codes the ``[pools]`` keys (docs/model.md): the route's PairRoute code, a
    pool's policy "same" as the run's policy and an alias as its policy, the link's 50
    GB/s as 5e7 bytes/ms (1 GB/s = 10⁹ bytes / 10³ ms); defaults (no key given) leave
    the run co-located."""
    import numpy as np

    import token_reference as ref
    from routesim.batching.dtypes import PairRoute, Role
    from routesim.batching.policies import NAMES
    from routesim.batching.runs import params_row, replica_records

    values = ref.defaults() | dict(prefill_replicas=1, decode_replicas=2, pair_route="transfer_aware",
                                   prefill_policy="least_queue", decode_policy="same", transfer_token_ms=0.25,
                                   lease_ms=500.0, link_latency_ms=2.0, link_bandwidth_gb_s=50.0,
                                   kv_bytes_per_token=1000)
    p = params_row(values, "prefix_affinity", n_replicas=3)
    assert (p["prefill_replicas"], p["pair_route"]) == (1, PairRoute.TRANSFER_AWARE)
    assert (p["prefill_policy"], p["decode_policy"]) == (NAMES["least_requests"], NAMES["prefix_affinity"])
    assert (p["transfer_token_ms"], p["lease_ms"], p["link_latency_ms"]) == (0.25, 500.0, 2.0)
    assert (p["link_bandwidth"], p["kv_bytes_per_token"]) == (5e7, 1000)
    colocated = params_row({k: v for k, v in ref.defaults().items() if k not in pd_keys.NAMES}, "round_robin",
                           n_replicas=3)
    rows = np.stack([colocated, p])
    assert replica_records(rows, np.ones((2, 3)))["role"].tolist() == [
        [Role.COLOCATED] * 3, [Role.PREFILL, Role.DECODE, Role.DECODE]]


def test_roles_split_the_cluster_first_replicas_prefill():
    """pools.roles: ``prefill = N_p`` makes replicas 0 … N_p - 1 the prefill pool, the
    rest the decode pool; 0 leaves every replica co-located."""
    from routesim.batching.dtypes import Role
    from routesim.batching.pools import roles

    C, P, D = Role.COLOCATED, Role.PREFILL, Role.DECODE
    assert roles([0, 1, 3], 4).tolist() == [[C, C, C, C], [P, D, D, D], [P, P, P, D]]


# --------------------------------------------------------- each pool's replica settings
def test_a_bad_model_description_names_the_sweep_key_and_the_file_key(tmp_path, run_cli):
    """A model description with a bad value: one line naming the sweep file and its key,
    then the description's file and key (routesim.calibrate.hardware's reader)."""
    (tmp_path / "m.toml").write_text("[model]\nlayers = -32\n")
    path = tmp_path / "bad.toml"
    path.write_text(edit(pools(TWO + '\nlink = { model = "m.toml" }')))
    assert_refused(*run_cli(path)[:3], path, "pools.link.model",
                   f"model description: {tmp_path / 'm.toml'}: [model] layers: expected a number > 0", tmp_path / "out")


def _build(text):
    from routesim.batching.grid import build
    sweep = routesim.parse_sweep(text, "tests/ok.toml")
    return sweep.stages[0], build(sweep, sweep.stages[0])


def test_a_pool_key_left_out_is_the_runs_replica_value():
    """A pool's replica key the file does not set takes the run's ``[replica]`` value
    (swept there: each run its own), one it sets is the pool's in every run; the kernel
    record holds both pools' settings, and each replica takes its own pool's."""
    import numpy as np

    from routesim.batching.runs import replica_records
    text = edit(pools(TWO + "\n\n[pools.decode_replica]\nmax_batch = 4\nstep_ms = { base = 3.0 }\n"
                      "step_cpu_ms = 0.5"), ("kv_blocks = 4096", "kv_blocks = [4096, 8192]"),
                (STAGE_POLICY, 'policy = "round_robin"'), ("scenario = [\"steady\", \"slow\"]", 'scenario = ["steady"]'))
    stage, grid = _build(text)
    p = grid.params
    assert p["kv_blocks"].tolist() == p["prefill_kv_blocks"].tolist() == p["decode_kv_blocks"].tolist()
    assert sorted(set(p["kv_blocks"].tolist())) == [4096, 8192]
    assert set(p["prefill_max_batch"].tolist()) == {16} and set(p["decode_max_batch"].tolist()) == {4}
    assert set(p["prefill_cost"][:, 0].tolist()) == {6.5} and set(p["decode_cost"][:, 0].tolist()) == {3.0}
    assert set(p["decode_step_cpu_ms"].tolist()) == {0.5} and set(p["prefill_step_cpu_ms"].tolist()) == {0.0}
    rep = replica_records(p, grid.factors)
    assert rep["max_batch"].tolist() == [[16, 4, 4]] * len(p)
    assert (rep["kv_blocks"] == p["kv_blocks"][:, None]).all()
    assert rep["cost"][:, :, 0].tolist() == [[6.5, 3.0, 3.0]] * len(p)
    assert rep["step_cpu_ms"].tolist() == [[0.0, 0.5, 0.5]] * len(p)


STAGE_POLICY = 'policy = ["round_robin", "least_tokens", "power_of_d"]'


def test_a_pool_of_another_gpu_is_accepted_and_recorded():
    """A prefill pool with the roofline cost (its coefficients partly its own, the rest
    ``[replica]``'s roofline_ms table, which the linear [replica] does not use but the pool
    does: accepted) and a decode pool with fewer blocks: the Dataset's attributes record
    the keys the file sets, not those a pool takes from [replica]."""
    stage = routesim.parse_sweep(edit(
        pools(TWO + '\n\n[pools.prefill_replica]\nstep_cost = "roofline"\nroofline_ms = { base = 3.0 }\n'
              "max_batched_tokens = 4096\n\n[pools.decode_replica]\nkv_blocks = 1024"),
        ("step_ms = { base = 6.5, per_prefill_token = 0.0198 }",
         "step_ms = { base = 6.5, per_prefill_token = 0.0198 }\nroofline_ms = { weights = 2.0 }")), "ok.toml").stages[0]
    unused = unused_params(stage.values, stage.given)
    assert "roofline_ms_weights" not in unused and "step_ms_base" not in unused
    assert {"prefill_step_cost", "prefill_roofline_ms_base", "decode_kv_blocks"} <= stage.given
    assert stage.values["decode_kv_blocks"] == (1024,) and stage.values["prefill_max_batched_tokens"] == (4096,)


def test_link_bytes_from_the_model_description():
    """``link.model`` names calibrate's description (relative to the sweep file): the
    link's bytes per token are 2 (K and V) · layers · kv_heads · head_dim · bytes_per_kv
    of that file, read here with tomllib (head_dim its default hidden_size / heads when
    the file leaves it out), and ``kv_bytes_per_token`` is then not recorded."""
    import tomllib
    from pathlib import Path

    model = tomllib.loads((Path(__file__).parents[1] / "examples" / "llama-3.1-8b-h100.toml").read_text())["model"]
    head_dim = model.get("head_dim", model["hidden_size"] / model["heads"])
    want = 2 * model["layers"] * model["kv_heads"] * head_dim * model.get("bytes_per_kv", 2)
    text = edit(pools(TWO + '\nlink = { model = "../examples/llama-3.1-8b-h100.toml" }'),
                (STAGE_POLICY, 'policy = "round_robin"'), ("scenario = [\"steady\", \"slow\"]", 'scenario = ["steady"]'))
    stage, grid = _build(text)
    assert set(grid.params["kv_bytes_per_token"].tolist()) == {want} == {131072}
    assert "kv_bytes_per_token" in unused_params(stage.values, stage.given)
