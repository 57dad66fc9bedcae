"""Hypothesis settings for the fuzz suite (``tests/fuzz``), applied per test, not globally.

``make test`` runs the ``ci`` level: derandomised (a fixed seed derived from each test), a few
hundred examples per property, so a CI run is reproducible and takes a few minutes in total.
``make fuzz`` sets ``ODF_FUZZ_PROFILE=long``: random seeds and many more examples, for hunting.
Any input that ever misbehaved is kept as an explicit ``@example`` (or a corpus case) next to
the property it broke, so every CI run repeats it.
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

LONG = os.environ.get("ODF_FUZZ_PROFILE") == "long"


def fuzz(examples: int = 300) -> settings:
    """Settings for one property: ``examples`` in CI, 50x as many (random seeds) in ``long``."""
    return settings(
        derandomize=not LONG,
        max_examples=examples * (50 if LONG else 1),
        deadline=timedelta(seconds=5),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )
