"""Checking a model's RoPE: ``audit`` (the loaded plan per layer, float64, precision, HF's own reading).

A command-level package over ``posenc.pretrained`` (the one reading of a model), ``posenc.families`` and
``posenc.formats``; ``posenc rope`` prints what it returns.
"""
