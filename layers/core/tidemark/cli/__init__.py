"""The ``tidemark`` command line: local runs of the real pipeline (``demo``, ``invoke``)."""
