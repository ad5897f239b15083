"""Scoring commands: ``python -m zipformer_pc.score`` (:mod:`zipformer_pc.scoring.score`: a hypothesis file
against its references, every metric of :mod:`zipformer_pc.metrics`) and ``python -m zipformer_pc.results``
(:mod:`zipformer_pc.scoring.make_results`: an experiment's RESULTS.md).  ``scoring/score.py`` and
``scoring/make_results.py`` are the same commands."""
