"""What recon says, rendered for people and scripts: the runtime view (:mod:`.runtime`), the kernel map
and its diff (:mod:`.kernels`), query answers (:mod:`.query`), findings (:mod:`.findings` as text,
:mod:`.sarif` as SARIF 2.1.0) and the dispatch graph (:mod:`.graph`: GraphML, JSON, DOT, Mermaid).
The spec's Markdown is :mod:`recon.spec.render`. A new output format goes here; nothing here decides
what runs.
"""
