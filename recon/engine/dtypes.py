"""The one table of element sizes: torch dtype names (``torch.bfloat16`` -> 2), the expert formats
model profiles name (``mxfp4`` -> 4 bits) and their scale formats (``e8m0`` -> 1). Read by the
epilogue checks, the roofline and the spec's weight table."""

from __future__ import annotations

# bytes per element of a torch dtype, by its name without ``torch.``
DTYPE_BYTES = {
    "float32": 4, "float": 4, "float64": 8, "double": 8, "bfloat16": 2, "float16": 2, "half": 2,
    "float8_e4m3fn": 1, "float8_e8m0fnu": 1, "float8_e5m2": 1, "uint8": 1, "int8": 1, "int32": 4, "int64": 8,
}
# bytes per block scale, by the short names model profiles use (None: no scales)
SCALE_BYTES = {"e8m0": 1, "e4m3": 1, "ue8m0": 1, "fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, None: 0}
# bits per stored weight element of the expert formats model profiles name
ELEMENT_BITS = {"mxfp4": 4, "nvfp4": 4, "int4": 4, "fp8": 8, "mxfp8": 8, "int8": 8, "bf16": 16, "fp16": 16}
