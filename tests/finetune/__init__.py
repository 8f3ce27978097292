"""Tests of posenc.finetune, posenc.models.lora and `posenc finetune`."""
