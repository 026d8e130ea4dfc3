"""Rule parameters are a contract: declared once per check (a dataclass with defaults), validated
when rules load, devices resolved there; and a check's results do not depend on which other rules
ran before it."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from typer.testing import CliRunner

from recon.checks import CheckContext, Devices, NoParams, params_dict, registry
from recon.cli import app
from recon.profiles import load_device, load_model
from recon.rules import RULES_DIR, RuleError, load_rules
from recon.scan import run_rules

BASE = (RULES_DIR / "arch-gate.yaml").read_text()


def _rules_dir(tmp_path, text: str, name: str = "arch-gate.yaml"):
    d = tmp_path / "rules"
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d


def _with_params(text: str, extra: str) -> str:
    return text.replace("params:\n", "params:\n" + extra, 1)


def test_every_check_declares_its_params_with_defaults():
    for name, fn in registry().items():
        cls = fn.params_class
        assert dataclasses.is_dataclass(cls), name
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING, f"{name}.{f.name} has no default"
            assert f.name in hints, f"{name}.{f.name} has no type"


def test_loaded_rules_carry_typed_params_with_devices_resolved():
    rules = {r.id: r for r in load_rules()}
    for r in rules.values():
        assert isinstance(r.params, registry()[r.check].params_class), r.id
    ag = rules["arch-gate"].params
    assert isinstance(ag.reference_devices, Devices)
    assert [d.short for d in ag.reference_devices] == ["h200", "b200"]
    assert ag.max_sites == 150 and ag.report_unknown_gates is False
    # a key the YAML leaves out takes the dataclass's default
    assert rules["triton-inner-loop-dequant"].params.require_one_of == ["exp2", "ldexp"]
    assert params_dict(ag)["reference_devices"] == ["h200", "b200"]


def test_rule_without_params_gets_the_defaults(tmp_path):
    text = BASE[: BASE.index("params:\n")] + BASE[BASE.index("examples:\n"):]
    rule = next(r for r in load_rules([_rules_dir(tmp_path, text)]) if r.id == "arch-gate")
    cls = registry()["arch_gate"].params_class
    assert rule.params.max_sites == cls.max_sites
    assert [d.short for d in rule.params.reference_devices] == ["h200"]  # the declared default, resolved too


@pytest.mark.parametrize("extra,key,words", [
    ("  max_site: 10\n", "max_site", "takes no parameter 'max_site'"),
    ("  max_sites: many\n", "max_sites", "must be int"),
    ("  report_unknown_gates: 1\n", "report_unknown_gates", "must be bool"),
    ("  site_paths: [a, b]\n", "site_paths", "must be str"),
])
def test_bad_params_are_refused_naming_file_and_key(tmp_path, extra, key, words):
    text = _with_params(BASE, extra)
    if key != "max_site":  # replace the YAML's own value instead of adding a second one
        text = BASE.replace(next(l for l in BASE.splitlines() if l.startswith(f"  {key}:")) + "\n", extra, 1)
    d = _rules_dir(tmp_path, text)
    with pytest.raises(RuleError) as e:
        load_rules([d])
    msg = str(e.value)
    assert str(d / "arch-gate.yaml") in msg and f"params.{key}" in msg and words in msg, msg
    assert "\n" not in msg


def test_unknown_reference_device_is_refused_at_load(tmp_path):
    text = BASE.replace("reference_devices: [h200, b200]", "reference_devices: [h200, h2000]")
    d = _rules_dir(tmp_path, text)
    with pytest.raises(RuleError) as e:
        load_rules([d])
    assert "params.reference_devices" in str(e.value) and "'h2000'" in str(e.value)


def test_cli_refuses_a_bad_rule_file_with_exit_2_and_one_line(tmp_path):
    d = _rules_dir(tmp_path, _with_params(BASE, "  gate_name_patern: x\n"))
    res = CliRunner().invoke(app, ["rules", "list", "--rules", str(d)])
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert len(lines) == 1 and "params.gate_name_patern" in lines[0] and "arch-gate.yaml" in lines[0], res.output


def test_check_without_params_refuses_any():
    assert dataclasses.fields(NoParams) == ()


# --- the gate model is keyed by its settings, so rule order cannot change a rule's gates ----------


GATED = {
    "sglang/srt/utils/common.py": (
        "import torch\n\n"
        "def is_sm120_supported():\n"
        "    return torch.cuda.get_device_capability()[0] == 12\n\n"
        "def is_sm100_supported():\n"
        "    return torch.cuda.get_device_capability()[0] == 10\n"
    ),
    # a platform property looked up through a name -> gate table: found only with the gate settings
    "sglang/srt/platforms/base.py": (
        "from sglang.srt.utils.common import is_sm100_supported, is_sm120_supported\n\n"
        "_PROBES = {'is_sm120': 'is_sm120_supported', 'is_sm100': 'is_sm100_supported'}\n\n"
        "class Platform:\n"
        "    def __getattr__(self, name):\n"
        "        return globals()[_PROBES[name]]()\n\n"
        "def get_platform():\n"
        "    return Platform()\n"
    ),
    "sglang/srt/layers/quantization/example_moe.py": (
        "from sglang.srt.platforms.base import get_platform\n\n"
        "def slot_forward(x):\n    return x\n\n"
        "def marlin_forward(x):\n    return x\n\n"
        "class ExampleMoEMethod:\n"
        "    def process_weights_after_loading(self, layer):\n"
        "        if get_platform().is_sm120:\n"
        "            layer._moe_backend = 'sm120_triton'\n"
        "            return\n"
        "        layer._moe_backend = 'marlin'\n\n"
        "    def apply(self, layer, x):\n"
        "        if layer._moe_backend == 'sm120_triton':\n"
        "            return slot_forward(x)\n"
        "        return marlin_forward(x)\n"
    ),
}


def test_gate_model_is_keyed_by_discovery_settings(synthetic):
    from recon.engine.gatemodel import DEFAULT_DISCOVERY, GateDiscovery, gate_model, evaluate_gates

    tree = synthetic(GATED)
    ctx = CheckContext(tree, load_device("rtx-pro-6000"), load_model(None))
    narrow = GateDiscovery(gate_name_pattern=r"^never_a_gate$", platform_receiver="^never$")
    assert gate_model(ctx, narrow).gates == {}  # asked first, with other settings ...
    default = gate_model(ctx)  # ... does not become everyone's model
    assert default.discovery == DEFAULT_DISCOVERY
    assert any(q.endswith("is_sm120_supported") for q in default.gates)
    assert evaluate_gates(ctx, narrow) == {}
    assert any(v is True for v in evaluate_gates(ctx).values())


def _bs(findings):
    return sorted((f.message, repr(sorted(f.data.items()))) for f in findings if f.rule_id == "backend-selection")


def test_backend_selection_alone_equals_its_part_of_a_full_scan(synthetic, tmp_path):
    """An arch-gate rule whose gate settings find no platform property runs first in a full scan;
    before gate models were keyed by their settings, backend-selection then saw its gate model and
    could not tell `get_platform().is_sm120`."""
    tree = synthetic(GATED)
    d = _rules_dir(tmp_path, BASE.replace("platform_receiver: 'platform'", "platform_receiver: '^never$'"))
    rules = load_rules([d])
    assert [r.id for r in rules][0] == "arch-gate"
    dev, mdl = load_device("rtx-pro-6000"), load_model(None)
    full = run_rules(tree, dev, mdl, rules, use_cache=False)
    alone = run_rules(tree, dev, mdl, [r for r in rules if r.id == "backend-selection"], use_cache=False)
    assert _bs(alone.findings) and _bs(full.findings) == _bs(alone.findings)
    assert any("'sm120_triton'" in m for m, _ in _bs(alone.findings))


def test_backend_selection_alone_on_a_release(tree_0513):
    """The same on the seed release with the shipped rules: `recon scan --rule backend-selection`."""
    dev, mdl = load_device("rtx-pro-6000"), load_model("DeepSeek-V4-Flash")
    rules = load_rules()
    full = run_rules(tree_0513, dev, mdl, rules)
    alone = run_rules(tree_0513, dev, mdl, [r for r in rules if r.id == "backend-selection"], use_cache=False)
    assert _bs(alone.findings) and _bs(full.findings) == _bs(alone.findings)


# --- the spec and apply read rule metadata, never rule ids -----------------------------------------


def test_no_rule_id_in_spec_templates_or_apply():
    import yaml

    from recon.resources import resource_dir

    root = RULES_DIR.parent
    ids = sorted(yaml.safe_load(p.read_text())["id"] for p in RULES_DIR.glob("*.yaml"))
    assert len(ids) >= 11
    files = sorted((root / "recon" / "spec").rglob("*.py")) + sorted((root / "recon" / "apply").rglob("*.py"))
    files += sorted(resource_dir("templates").glob("*"))
    assert any(p.name == "spec.md.j2" for p in files) and any(p.name == "moepath.py" for p in files)
    hits = [f"{p.relative_to(root)}: {i}" for p in files for i in ids if i in p.read_text()]
    assert not hits, hits


def test_spec_sections_come_from_rule_metadata(tmp_path):
    """A rule renamed in YAML keeps its place in the spec: the spec reads ``spec:``, not the id."""
    from recon.spec.roles import Roles

    d = tmp_path / "renamed"
    d.mkdir()
    for p in RULES_DIR.glob("*.yaml"):
        (d / p.name).write_text(p.read_text())
    src = (d / "triton-cuda-core-reduction.yaml").read_text()
    (d / "triton-cuda-core-reduction.yaml").write_text(src.replace("id: triton-cuda-core-reduction", "id: cuda-core-sum"))
    import os

    os.environ.pop("RECON_RULES_PATH", None)
    from recon import rules as rules_mod

    orig = rules_mod.RULES_DIR
    rules_mod.RULES_DIR = d
    try:
        roles = Roles(load_rules())
    finally:
        rules_mod.RULES_DIR = orig
    assert roles.root_causes()[0] == "cuda-core-sum" and roles.slot_kernel("cuda-core-sum")
    assert roles.root_causes() == ["cuda-core-sum", "triton-inner-loop-dequant", "per-call-weight-conversion", "eager-epilogue", "low-occupancy-launch"]


def test_spec_metadata_is_validated(tmp_path):
    text = BASE.replace("spec:\n  section: gates", "spec:\n  section: gatez")
    with pytest.raises(RuleError, match=r"spec\.section must be one of"):
        load_rules([_rules_dir(tmp_path, text)])
    text = BASE.replace("spec:\n  section: gates", "spec:\n  sektion: gates")
    with pytest.raises(RuleError, match=r"spec\.sektion"):
        load_rules([_rules_dir(tmp_path, text)])


def test_a_misspelled_rule_field_is_refused(tmp_path):
    with pytest.raises(RuleError, match=r"field 'prams' is not a rule field"):
        load_rules([_rules_dir(tmp_path, BASE.replace("params:\n", "prams:\n", 1))])
