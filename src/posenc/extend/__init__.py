"""Context extension on a pretrained model: what each RoPE scaling method does past the trained length.

Without fine-tuning, a checkpoint plus one scheme (``methods``: RoPE frequency
scalings and position remappings, on the layers ``--layers`` selects) is
measured by the loss at every position of one long causal pass (``loss``) and
by needle retrieval (``retrieval``: single/multi-key passkeys, multi-value;
``stats``: Wilson intervals and paired exact McNemar tests) over a grid of
cells saved as they finish (``grid``, ``cells``), on long real texts that
install offline (``texts``); ``report`` writes results.json, results.md, PNG
plots and an HTML page.
``posenc extend`` is the command line.
"""

from posenc.extend.cells import CellStore
from posenc.extend.grid import Grid, GridConfig
from posenc.extend.loss import bucket_edges, bucket_perplexity, token_nll
from posenc.extend.methods import LEFT_OUT, METHODS, build_variant, check_methods, method_options, selected_layers
from posenc.extend.passkey import build_prompt, greedy_continuation, make_trial, score, wilson
from posenc.extend.texts import Document, doc_tokens, load_document

__all__ = [
    "LEFT_OUT",
    "METHODS",
    "CellStore",
    "Document",
    "Grid",
    "GridConfig",
    "bucket_edges",
    "bucket_perplexity",
    "build_prompt",
    "build_variant",
    "check_methods",
    "doc_tokens",
    "greedy_continuation",
    "load_document",
    "make_trial",
    "method_options",
    "score",
    "selected_layers",
    "token_nll",
    "wilson",
]
