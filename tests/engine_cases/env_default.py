"""An environment variable read with a default: unset (no --env), the default is the value."""

import os


# expect: False
def case_flag():
    return os.environ.get("SGLANG_ENGINE_CASE_FLAG", "0") == "1"


# expect: 'auto'
def case_string():
    return os.getenv("SGLANG_ENGINE_CASE_MODE", "auto")
