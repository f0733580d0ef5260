"""GPU type names ("V100", "T4"): what a name may be, and the name of an NVML product.

One rule for every side that names a type: the agent (`--gpu-type`, or the type it reads
from NVML), the daemon (RegisterNode's `gpu_type`) and the job spec (`gpu_types`). Names
are compared exactly, so they are upper case as NVML spells models: a job asking for "t4"
would otherwise wait forever beside a node of type "T4".
"""
from __future__ import annotations

import re

#: Letters are upper case; at most 32 characters; no spaces (shown in tables, used in labels).
GPU_TYPE_RE = re.compile(r"[A-Z0-9][A-Z0-9._-]{0,31}")
GPU_TYPE_HINT = "must be a GPU model name such as V100, T4 or H100 (at most 32 upper-case letters, digits, " \
                "'.', '_' or '-')"

#: Words of NVML product names that name the vendor or the product line, not the model.
_BRAND_WORDS = frozenset({"NVIDIA", "TESLA", "GEFORCE", "QUADRO"})
_TOKEN_SPLIT = re.compile(r"[\s\-_/]+")


def gpu_type_problem(value: str) -> str | None:
    """Why `value` is not a GPU type name, or None when it is one (callers add the field)."""
    if not GPU_TYPE_RE.fullmatch(value):
        shown = repr(value if len(value) <= 40 else value[:37] + "...")
        return f"{shown} {GPU_TYPE_HINT}"
    return None


def gpu_type_of(product_name: str) -> str:
    """The GPU type of an NVML product name ("" when nothing in it looks like a model).

    The model is the first token holding a digit ("Tesla V100-SXM2-16GB" -> "V100",
    "NVIDIA H100 80GB HBM3" -> "H100"); a bare number keeps the product line before it
    ("NVIDIA GeForce RTX 3090" -> "RTX3090").
    """
    tokens = [t.upper() for t in _TOKEN_SPLIT.split(product_name) if t]
    for i, token in enumerate(tokens):
        if not any(c.isdigit() for c in token):
            continue
        if token.isdigit() and i > 0 and tokens[i - 1].isalpha() and tokens[i - 1] not in _BRAND_WORDS:
            token = tokens[i - 1] + token
        cleaned = re.sub(r"[^A-Z0-9._-]", "", token)[:32].lstrip("._-")
        if cleaned:
            return cleaned
    return ""
