"""Device and dtype names ("cpu", "cuda:N", "auto"; "auto", "float32", ...) as ``from_pretrained`` arguments."""

from __future__ import annotations

import re

from ..errors import ModelLoadError

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""Every ``--dtype`` (and ``ModelPool(dtype=)``) there is: auto picks bfloat16 on a GPU or a CPU with native
bfloat16, else float32. llama.cpp members keep their GGUF's own types, but a name outside these is refused there too."""


def check_dtype(dtype: str | None) -> str:
    """``dtype`` when it is one of :data:`DTYPES` (``None`` and "" mean auto), else one line saying which are."""
    if dtype in (None, ""):
        return "auto"
    if dtype not in DTYPES:
        shown = dtype if isinstance(dtype, str) and len(dtype) <= 40 else repr(dtype)[:40]
        raise ModelLoadError(f"Unknown dtype {shown!r}: use {', '.join(DTYPES)}.")
    return dtype


def resolve_device(device: str) -> tuple[str, dict]:
    """A device string ("cpu", "cuda:N", "auto") as from_pretrained arguments."""
    import torch

    device = (device or "cpu").strip()
    if device == "auto":
        if not torch.cuda.is_available():
            return "cpu", {}
        return "auto", {"device_map": "auto"}
    if device == "cpu":
        return "cpu", {}
    if re.fullmatch(r"cuda(:\d+)?", device):
        if not torch.cuda.is_available():
            raise ModelLoadError(f"Device {device!r} was asked for, but this machine has no CUDA GPU. Use --device cpu.")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ModelLoadError(f"Device {device!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s).")
        return device, {"device_map": device}
    raise ModelLoadError(f"Unknown device {device!r}: use 'cpu', 'cuda:N' or 'auto'.")


def cpu_has_fast_bf16() -> bool:
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def resolve_dtype(dtype: str, device: str):
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if check_dtype(dtype) == "auto":
        if device != "cpu":
            return torch.bfloat16
        # On CPUs with native bfloat16 (AVX512-BF16, AMX) bfloat16 runs these models 2-4x faster than
        # float32 (the output layer of a 262k vocabulary most of all); elsewhere float32 is faster.
        return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32
    return table[dtype]
