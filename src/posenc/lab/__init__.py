"""The lab: measurements of position schemes and the source articles' experiments.

``measures`` holds pure functions on tables and similarities; ``experiments``
runs each claim of the source articles (listed in docs/lab.md); ``report`` prints and renders the results.
"""
