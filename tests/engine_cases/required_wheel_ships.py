"""An optional-package probe decided by what the release's pinned kernel wheel ships: the wheel of
sglang-kernel==0.4.7 carries triton_kernels beside sgl_kernel (its RECORD), so the probe holds.

# requires: sglang-kernel==0.4.7
# ships: sglang-kernel==0.4.7: sgl_kernel triton_kernels
"""

import importlib.util


# expect: True
def case_shipped_inside_a_required_wheel():
    return importlib.util.find_spec("triton_kernels") is not None


# expect: True
def case_required_by_name():
    return importlib.util.find_spec("sgl_kernel") is not None


# expect: 'unknown'
def case_neither_required_nor_shipped():
    return importlib.util.find_spec("some_optional_package") is not None


# expect: True
def case_module_of_the_tree_itself():
    return importlib.util.find_spec("sglang.srt.case") is not None
