"""``python -m posenc …``: the same command line as ``posenc …``."""

from posenc.cli import main

raise SystemExit(main())
