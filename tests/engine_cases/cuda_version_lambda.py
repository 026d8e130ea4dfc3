"""The CUDA version torch was built with (``torch.version.cuda``) is the device profile's, and a
module-level name bound to a lambda is called through (``is_hopper_with_cuda_12_3 = lambda: _check(9)``)."""

import torch


def _check(cc_major):
    return torch.cuda.get_device_capability()[0] == cc_major and tuple(
        map(int, torch.version.cuda.split(".")[:2])
    ) >= (12, 3)


is_hopper_with_cuda_12_3 = lambda: _check(9)  # noqa: E731
is_ampere_with_cuda_12_3 = lambda: _check(8)  # noqa: E731


# expect: '12.8'
def case_cuda_version_string():
    return torch.version.cuda


# expect: True
def case_version_compare():
    return tuple(map(int, torch.version.cuda.split(".")[:2])) >= (12, 3)


# expect: True
def case_lambda_bound_name():
    return is_hopper_with_cuda_12_3()


# expect: False
def case_lambda_bound_name_other_arch():
    return is_ampere_with_cuda_12_3()
