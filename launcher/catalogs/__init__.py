"""Flag catalogues from the engine that ships: `llm-d-launcher catalog build` runs generate.py in the
engine's own interpreter (the images do it at build time into LLMD_CATALOG_DIR), and `run` and `plan`
put those catalogues on the shelf before the built-in ones (roles/flags.py chooses by version)."""
