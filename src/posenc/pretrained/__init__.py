"""Loading real pretrained checkpoints (HF folders and GGUF files)."""
