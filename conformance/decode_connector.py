"""A stand-in KV connector for vLLM's decode side (issue 42 item 5), scheduler role only.

Loaded by vLLM 0.30.0's own factory (``KVConnectorFactory.create_connector``, through
``KVTransferConfig(kv_connector="DecodeSideConnector", kv_connector_module_path=
"decode_connector", kv_role="kv_consumer")``) when conformance/vllm_driver.py runs a
case with ``remote_prefill`` requests. It implements ``KVConnectorBase_V1``'s scheduler
side as the NIXL pull connector's decode side does
(``distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py``, PS below):

- ``get_num_new_matched_tokens(request, local)``: a request whose
  ``kv_transfer_params`` say ``do_remote_prefill`` gets ``(P − local, True)`` (PS:60-66:
  all prompt tokens, less the block-aligned local hit the scheduler passes); any other
  request ``(0, False)`` (PS:106-107).
- ``update_state_after_alloc``: records the read (request id, tokens to read) and sets
  ``do_remote_prefill = False`` (PS:187-190: one transfer per request, so a preempted
  request recomputes its prompt locally when it is admitted again).
- ``build_connector_meta``: the reads recorded since the last call
  (:class:`DecodeSideMetadata`), handed to the worker — here the driver, which plays
  the worker and reports each read's end through ``update_from_output``'s
  ``KVConnectorOutput.finished_recving``.
- ``request_finished``: ``(False, None)`` (PS:234-235: a decode node not in
  bidirectional mode frees its blocks at once).

Nothing here moves bytes: the worker-side methods are never called on the scheduler's
connector (``KVConnectorRole.SCHEDULER``) and raise if they are.
"""

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)


@dataclass
class DecodeSideMetadata(KVConnectorMetadata):
    """The reads this step starts: request id -> number of prompt tokens to read."""
    reqs_to_recv: dict = field(default_factory=dict)


class DecodeSideConnector(KVConnectorBase_V1):
    """NIXL pull mode's decode-side scheduler behaviour, without NIXL (see the module)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self._pending = {}

    # -- scheduler side -------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        params = request.kv_transfer_params
        if params is not None and params.get("do_remote_prefill"):
            count = len(request.prompt_token_ids or []) - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        params = request.kv_transfer_params
        if not params or not params.get("do_remote_prefill"):
            return
        if num_external_tokens > 0:
            self._pending[request.request_id] = num_external_tokens
        params["do_remote_prefill"] = False

    def build_connector_meta(self, scheduler_output):
        meta = DecodeSideMetadata(reqs_to_recv=self._pending)
        self._pending = {}
        return meta

    def request_finished(self, request, block_ids):
        return False, None

    # -- worker side: never used by the scheduler's connector ------------------------
    def start_load_kv(self, forward_context, **kwargs):
        raise NotImplementedError("scheduler-side stand-in")

    def wait_for_layer_load(self, layer_name):
        raise NotImplementedError("scheduler-side stand-in")

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        raise NotImplementedError("scheduler-side stand-in")

    def wait_for_save(self):
        raise NotImplementedError("scheduler-side stand-in")
