"""The MLA library adapters (attn_contract/mla.py's two forms) and what they share.

``base.MLALibraryBackend`` carries the family's declared capabilities and support checks;
``common`` the helpers the adapters call (query and latent views, packed slots, import and
capability probes); ``prefill`` vLLM's chunked MLA prefill the torch reference backend runs.
Each adapter registers under its own entry-point name (pyproject.toml: flashinfer-mla,
flash-attn-mla, flashmla). The library probe lives outside the installed package
(``python3 -m tools.mla_probe``)."""
