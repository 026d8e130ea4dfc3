"""Every test that needs a released wheel is marked `network` by the fixture it uses (conftest)."""
import subprocess
import sys

from tests.conftest import REPO


def _collected(*args) -> set[str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    return {l.strip() for l in r.stdout.splitlines() if "::" in l}


def test_wheel_fixtures_mark_their_tests_network():
    files = ["tests/test_cli.py", "tests/test_profiles.py", "tests/test_targets.py", "tests/test_rules_configs.py"]
    net = _collected("-m", "network", *files)
    offline = _collected("-m", "not network", *files)
    assert not net & offline
    # through another fixture (test_cli's `root` uses sglang_0513), directly, and by hand
    assert "tests/test_cli.py::test_query_where_json" in net
    assert "tests/test_profiles.py::test_model_classes_exist_in_real_tree" in net
    assert "tests/test_targets.py::test_unknown_version_cannot_be_fetched" in net
    # parametrized with a wheel fixture's name, fetched with request.getfixturevalue
    assert "tests/test_rules_configs.py::test_h200_has_some_shapes[tree_new]" in net
    assert "tests/test_profiles.py::test_seed_model" in offline and "tests/test_targets.py::test_bad_versions" in offline


def test_a_test_that_loads_a_release_itself_is_network():
    """A release no fixture holds, loaded in the test's body (0.5.16, 0.5.20): network, not quick."""
    files = ["tests/test_placement.py", "tests/test_will_it_run.py"]
    net, quick = _collected("-m", "network", *files), _collected("-m", "quick", *files)
    for t in ("tests/test_placement.py::test_unseen_release_places_findings",
              "tests/test_will_it_run.py::test_a_release_pinning_sm120_kernels_gives_no_error"):
        assert t in net and t not in quick
    assert quick  # the rest of those files' offline tests stay quick


def test_quick_is_the_offline_core():
    """`-m quick`: offline tests only, without the slow offline files (conftest.NOT_QUICK)."""
    files = ["tests/test_cli.py", "tests/test_profiles.py", "tests/test_install_layout.py", "tests/test_ci_command.py"]
    quick = _collected("-m", "quick", *files)
    assert quick and not quick & _collected("-m", "network", *files)
    assert "tests/test_profiles.py::test_seed_model" in quick
    assert "tests/test_ci_command.py::test_ci_runs_the_readme_command" in quick
    assert not any(t.startswith("tests/test_install_layout.py") for t in quick)
