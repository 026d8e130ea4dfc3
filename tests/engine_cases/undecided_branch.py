"""A branch on a test the engine cannot decide (a file that exists only on the user's disk): the
value is unknown, and a walk of ``Method.apply`` keeps both outcomes with the test and its line,
taking neither as what runs. A call made on both sides, or before the branch, runs either way.
``tests/test_engine_cases.py::test_undecided_branch_keeps_both_outcomes`` walks it."""

import os

import flashinfer

USE_FAST = True


def _on_disk():
    return os.path.exists("/etc/only-on-the-users-disk")


def shared():
    flashinfer.op_shared()


class Method:
    def apply(self, x):
        flashinfer.op_first(x)
        if _on_disk():
            flashinfer.op_if_held(x)
            shared()
        else:
            flashinfer.op_if_not(x)
            shared()
        if USE_FAST:  # decided by the engine: only one side is reached
            flashinfer.op_decided(x)
        else:
            flashinfer.op_never(x)


# expect: 'unknown'  (the test between the two outcomes: nothing in the tree decides it)
def case_the_test_is_undecided():
    return _on_disk()


# expect: True
def case_a_module_constant_is_decided():
    return USE_FAST
