"""Compatibility re-export: the Transformer models now live in ``posenc.models``.

``from posenc.transformer import ModelConfig, build_decoder_only, ...`` keeps
working; new code imports from ``posenc.models`` (config, parts, builders and
the model classes each have their own module there).
"""

from posenc.models import *  # noqa: F403 - the same public names, one list
from posenc.models import __all__  # noqa: F401
