"""``posenc explore``: an interactive page where a learner changes a scheme, d, base, L and positions and
watches the position table, the distance profile, the similarity matrix and the attention logits change —
every number computed by the library's own functions (``posenc.lab.measures``), in Korean and English.

    posenc explore                      # http://127.0.0.1:8765/ opens in the browser
    posenc explore --port 0 --no-browser

>>> from posenc.explore.params import parse_view
>>> from posenc.explore.views import properties
>>> properties(parse_view({"scheme": "sinusoidal", "dim": "16", "length": "64"}))["row"]["norm_constant"]
True
"""

from posenc.explore.params import ParamError, ViewRequest, parse_view
from posenc.explore.server import ExploreServer, make_server

__all__ = ["ExploreServer", "ParamError", "ViewRequest", "make_server", "parse_view"]
