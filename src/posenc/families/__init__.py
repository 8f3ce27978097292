"""Model families: one file each, an HF-config reader and the layer plan it implies (work in progress)."""
