"""The lab: measurements of position schemes and the source articles' experiments.

``measures`` holds pure functions on tables and similarities; ``experiments``
runs each claim of the source articles (listed in docs/lab.md); ``report`` prints and renders the results,
in English or Korean (``i18n``: the language rule and the frame's words; ``texts_ko``: each experiment's
Korean text); ``course`` runs and prints the claims article by article for the notebooks in notebooks/.
"""
