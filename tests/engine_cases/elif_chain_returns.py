"""Code after an ``if``/``elif`` chain every branch of which returns runs only when every test of
the chain failed (SGLang 0.5.19's ``UnquantizedLinearMethod.apply``: ``if amx: return ...``
``elif aiter: return ...`` ``elif bf16 backend optimized and ...: return ...`` then
``return F.linear(...)``). A walk of ``Method.apply`` keeps the fallback under the undecided
``elif``'s negation, not only under the first (decided) test's.
``tests/test_engine_cases.py::test_code_after_an_elif_chain_that_returns_needs_every_test_failed`` walks it."""

import os

import flashinfer

USE_AMX = False


def _optimized(x):
    return os.path.exists("/etc/only-on-the-users-disk")


class Method:
    def apply(self, x):
        if USE_AMX:
            return flashinfer.op_amx(x)
        elif _optimized(x):
            return flashinfer.op_optimized(x)
        return flashinfer.op_fallback(x)


# expect: False
def case_the_first_test_is_decided():
    return USE_AMX
