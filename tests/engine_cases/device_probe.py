"""A device probe: the scenario's device answers (an H200 is sm_90, CUDA)."""

import torch


# expect: True
def case_capability():
    major, minor = torch.cuda.get_device_capability()
    return major == 9


# expect: 'hopper'
def case_branch_on_probe():
    if torch.cuda.get_device_capability()[0] >= 10:
        return "blackwell"
    return "hopper"
