"""The lab: measurements of position schemes and the source articles' experiments.

``measures`` holds pure functions on tables and similarities; ``experiments``
runs each claim of shared/SPEC.md; ``report`` prints and renders the results.
"""
