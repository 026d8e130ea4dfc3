"""recon's answers for the oracle's cells: the runtime view's ``server_args`` (value, and whether
recon decided it), computed in-process with the release's tree loaded once."""

from __future__ import annotations

import shlex


def load_tree(version: str):
    from recon.target import from_version
    from recon.tree import load

    return load(from_version(version))


def answers(tree, device: str, model_dir: str, flags: list, env: dict) -> dict:
    """field -> {"value", "decided", "source"} for every field recon's view tracks; or
    {"__error__": message} when recon refuses the cell (a bad flag: exit 2)."""
    from recon.checks import CheckContext
    from recon.errors import ReconError
    from recon.profiles import load_device, load_model
    from recon.runtime import build, parse_server_args

    try:
        dev = load_device(device)
        mdl = load_model(model_dir)
        parsed = parse_server_args(tree, shlex.join(flags)) if flags else parse_server_args(tree, None)
        view = build(CheckContext(tree, dev, mdl, server_flags=parsed, env=env), parsed, env)
    except ReconError as e:
        return {"__error__": str(e)}
    out = {}
    forked = _forked_fields(view)
    for name, rec in view.server_args.items():
        if not isinstance(rec, dict):
            continue
        src = str(rec.get("source", ""))
        # Undecided: another resolution (a fork) changes it, code outside the arguments writes it
        # later, or recon holds no value for it (an unknown value reads as None in the evaluator).
        decided = name not in forked and not rec.get("later") and rec.get("value") not in (None, "unset")
        out[name] = {"value": rec.get("value"), "decided": decided, "source": src,
                     "where": f"{rec.get('path', '')}:{rec.get('line', '')}".strip(":")}
    return out


def _forked_fields(view) -> set:
    """Fields another resolution of the view (an undecided test's other outcome) changes."""
    names = set()
    for fork in view.forks or []:
        for ch in fork.get("changes", []) if isinstance(fork, dict) else []:
            if isinstance(ch, dict) and ch.get("field"):
                names.add(ch["field"])
            elif isinstance(ch, (list, tuple)) and ch:
                names.add(ch[0])
        if isinstance(fork, dict) and isinstance(fork.get("changes"), dict):
            names.update(fork["changes"])
    return names
