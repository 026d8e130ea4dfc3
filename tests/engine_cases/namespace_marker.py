"""A server argument read through the config namespace a marker in its annotation names (SGLang
0.5.19 declares ``flashinfer_mxfp4_moe_precision: A[..., NS("exec.moe")] = "default"`` on ServerArgs
itself, and ``Mxfp4MoEMethod.__init__`` reads ``get_exec().moe.flashinfer_mxfp4_moe_precision``;
later releases declare it in an ``ExecMoe`` group class). The value is the resolved argument; the
same name under another namespace path is not that field.

# beside: sglang/srt/server_args.py: from typing import Annotated as A\nfrom sglang.srt.case import NS\nclass ServerArgs:\n    moe_precision: A[str, "help text", NS("exec.moe")] = "default"\n    plain_knob: A[str, "help text"] = "x"
"""


class NS:
    def __init__(self, path):
        self.path = path


class _Context:
    def config_bag(self, name):
        return self._bags[name]


_CONTEXT = _Context()


def get_exec():
    return _CONTEXT.config_bag("exec")


def get_model():
    return _CONTEXT.config_bag("model")


# expect: 'default'
def case_a_field_read_through_its_marked_namespace():
    return get_exec().moe.moe_precision


# expect: 'unknown'  (the field is projected into exec.moe, not model.moe)
def case_the_same_name_under_another_namespace():
    return get_model().moe.moe_precision


# expect: 'unknown'  (no marker: not projected into any namespace)
def case_a_field_with_no_marker():
    return get_exec().moe.plain_knob
