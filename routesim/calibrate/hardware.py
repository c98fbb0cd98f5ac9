"""The model/hardware description (``--model MODEL.toml``) and the ties it gives.

Format (docs/calibration.md §3; every key required unless a default is given)::

    [model]
    name = "Llama-3.1-8B"          # optional, for the printout
    layers = 32
    hidden_size = 4096
    heads = 32
    kv_heads = 8
    head_dim = 128                 # default hidden_size / heads
    mlp_size = 14336               # the gated MLP's intermediate size
    vocab = 128256
    bytes_per_param = 2            # default 2 (bf16)
    bytes_per_kv = 2               # default 2

    [hardware]
    name = "H100 SXM"              # optional
    bandwidth_GBps = 3350          # memory bandwidth, 1e9 bytes/s
    peak_tflops = 989              # dense bf16 peak, 1e12 FLOP/s

What it gives is the *ratio* of two coefficients that share one bound resource, which
does not depend on how efficiently the GPU uses it:

- prefill (compute-bound): ``per_prefill_token_pair / per_prefill_token`` = attention
  FLOPs per token pair (4 · layers · heads · head_dim: QKᵀ and AV) over linear FLOPs
  per token (2 · parameters);
- decode (memory-bound): ``per_decode_sequence / per_kv_token`` = the bytes a decoding
  sequence moves besides its KV (its logits, fp32, written and read back for sampling:
  2 · 4 · vocab) over KV bytes per token (2 · layers · kv_heads · head_dim ·
  bytes_per_kv).

It also gives the roofline's figures at full efficiency (``priors`` in step_ms terms,
``roofline_priors`` in roofline_ms terms: the weights' and a KV token's bytes over the
bandwidth, a token's and a pair's FLOPs over the peak), and the roofline's two ratios
(``roofline_ratios``: KV bytes per token over weight bytes; attention FLOPs per pair
over linear FLOPs per token), which tie its coefficients (calibrate.roofline).
"""

import tomllib
from pathlib import Path

from ..step_cost import defaults, linear
from .logs import LogError

MODEL_KEYS = {"name": None, "layers": ..., "hidden_size": ..., "heads": ..., "kv_heads": ...,
              "head_dim": None, "mlp_size": ..., "vocab": ..., "bytes_per_param": 2, "bytes_per_kv": 2}
HARDWARE_KEYS = {"name": None, "bandwidth_GBps": ..., "peak_tflops": ...}

_D = defaults(linear)
DEFAULT_RATIOS = {"prefill": _D["per_prefill_token_pair"] / _D["per_prefill_token"],
                  "decode": _D["per_decode_sequence"] / _D["per_kv_token"]}
"""Without ``--model``: the ratios of routesim's default step_ms (token-model.md §2.3;
routesim.step_cost.linear)."""


def _section(path, doc, name, keys):
    sec = doc.get(name)
    if not isinstance(sec, dict):
        raise LogError(path, f"[{name}]", "missing table")
    unknown = sorted(set(sec) - set(keys))
    if unknown:
        raise LogError(path, f"[{name}] {unknown[0]}", f"unknown key (known: {', '.join(keys)})")
    out = {}
    for key, default in keys.items():
        if key not in sec:
            if default is ...:
                raise LogError(path, f"[{name}] {key}", "missing")
            out[key] = default
            continue
        v = sec[key]
        if key == "name":
            out[key] = str(v)
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise LogError(path, f"[{name}] {key}", f"expected a number > 0, got {v!r}")
        else:
            out[key] = float(v)
    return out


def read(path) -> dict:
    """The description as ``{"model": {...}, "hardware": {...}}`` with every default filled."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise LogError(path, "file", f"cannot read ({exc.__class__.__name__})") from None
    except tomllib.TOMLDecodeError as exc:
        raise LogError(path, "file", f"not TOML ({exc})") from None
    extra = sorted(set(doc) - {"model", "hardware"})
    if extra:
        raise LogError(path, extra[0], "unknown table (expected [model] and [hardware])")
    m = _section(path, doc, "model", MODEL_KEYS)
    h = _section(path, doc, "hardware", HARDWARE_KEYS)
    if m["head_dim"] is None:
        m["head_dim"] = m["hidden_size"] / m["heads"]
    return {"model": m, "hardware": h}


def derive(desc) -> dict:
    """Parameters (1), bytes and FLOPs per unit, the two tie ratios, and ``priors``:
    the roofline's step_ms terms at full efficiency (ms, no overhead in ``base``)."""
    m, h = desc["model"], desc["hardware"]
    L, d, hd = m["layers"], m["hidden_size"], m["head_dim"]
    q = m["heads"] * hd
    kv = m["kv_heads"] * hd
    params = L * (2 * d * q + 2 * d * kv + 3 * d * m["mlp_size"]) + 2 * m["vocab"] * d
    bw = h["bandwidth_GBps"] * 1e9
    peak = h["peak_tflops"] * 1e12
    flops_token = 2.0 * params
    flops_pair = 4.0 * L * q
    kv_bytes = 2.0 * L * kv * m["bytes_per_kv"]
    seq_bytes = 2.0 * 4.0 * m["vocab"]
    priors = {"base": 1000.0 * params * m["bytes_per_param"] / bw,
              "per_prefill_token": 1000.0 * flops_token / peak,
              "per_prefill_token_pair": 1000.0 * flops_pair / peak,
              "per_decode_sequence": 1000.0 * seq_bytes / bw,
              "per_kv_token": 1000.0 * kv_bytes / bw}
    weight_bytes = params * m["bytes_per_param"]
    roofline = {"weights": 1000.0 * weight_bytes / bw, "per_kv_token": priors["per_kv_token"],
                "per_token": priors["per_prefill_token"], "per_token_pair": priors["per_prefill_token_pair"]}
    return {"parameters": params, "flops_per_token": flops_token, "attn_flops_per_pair": flops_pair,
            "kv_bytes_per_token": kv_bytes, "sequence_bytes": seq_bytes, "priors": priors,
            "ratios": {"prefill": flops_pair / flops_token, "decode": seq_bytes / kv_bytes},
            "roofline_priors": roofline,
            "roofline_ratios": {"memory": kv_bytes / weight_bytes, "compute": flops_pair / flops_token}}
