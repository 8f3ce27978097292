"""``posenc explore``: serve the interactive page on a local port until Ctrl-C.

    posenc explore                         # http://127.0.0.1:8765/, opened in the default browser
    posenc explore --port 0 --no-browser   # any free port; print the address only
    posenc explore --host 0.0.0.0          # reachable from other machines (a warning says so)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from posenc.cli_options import add_quiet, add_threads, command_help


def run(args: argparse.Namespace) -> int:
    import torch

    from posenc.explore.server import is_loopback, make_server

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0 … 65535 (0: any free port), got {args.port}")
    torch.set_num_threads(args.threads or 1)  # requests run in parallel threads: one intra-op thread each
    try:
        server = make_server(args.host, args.port, quiet=args.quiet)
    except OSError as err:
        print(f"posenc: error: cannot listen on {args.host}:{args.port} ({err.strerror or err}); "
              "choose another port with --port N, or --port 0 for any free one", file=sys.stderr)
        return 1
    if not is_loopback(args.host):
        print(f"posenc explore: warning: listening on {args.host}, not only on this machine: anyone who can "
              "reach this address can use the page (it reads and writes no files)", file=sys.stderr)
    print(f"posenc explore: {server.url}  (Ctrl-C stops)", flush=True)
    if not args.no_browser:
        import webbrowser

        webbrowser.open(server.url)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("posenc explore: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("explore", help="an interactive page: change a scheme and watch positions act (ko/en)",
                       description="Serve a local page where you pick a position scheme and its options, d, base, "
                       "L and positions, and watch the position table, the distance profile, the similarity matrix, "
                       "the attention logits and the scheme's property row change. Korean and English.",
                       **command_help(examples=(
                           "posenc explore                         # http://127.0.0.1:8765/ in the default browser",
                           "posenc explore --port 0 --no-browser   # any free port; print the address only",
                           "posenc explore --host 0.0.0.0          # reachable from other machines (a warning says so)")))
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; others get a warning)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks any free port)")
    p.add_argument("--no-browser", action="store_true", help="print the address, do not open a browser")
    add_threads(p, help="torch threads per request (default 1: requests already run in parallel)")
    add_quiet(p)
    p.set_defaults(func=run)
