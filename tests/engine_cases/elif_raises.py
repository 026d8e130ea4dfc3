"""A precondition written as an ``elif`` chain: ``if standard: ... elif bypassed: raise ...
else: raise ...`` (SGLang 0.5.19's ``Mxfp4FlashinferTrtllmMoEMethod.apply`` on the top-k format).
Every way past the test but one raises, so a step that runs took that one: a walk of
``Method.apply`` reaches ``op_standard`` decided, with the test noted as a met precondition. A
test one of whose other branches runs something else stays open.
``tests/test_engine_cases.py::test_a_precondition_written_as_an_elif_chain_is_met`` walks it."""

import os

import flashinfer


def _standard(x):
    return os.path.exists("/etc/only-on-the-users-disk")


def _bypassed(x):
    return os.path.exists("/etc/another-file")


class Method:
    def apply(self, x):
        if _standard(x):
            flashinfer.op_standard(x)
        elif _bypassed(x):
            raise NotImplementedError("bypassed")
        else:
            raise ValueError("unsupported")
        if _bypassed(x):
            flashinfer.op_if_bypassed(x)
        elif _standard(x):
            raise ValueError("no")
        else:
            flashinfer.op_otherwise(x)


# expect: 'unknown'  (the test itself is not decided: it is met because the step runs)
def case_the_test_alone_is_undecided():
    return _standard(1)
