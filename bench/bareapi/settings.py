"""The product's settings plus one URL: a bare Django view that does one INSERT.

The benchmark's reference for POST /api/v1/users/: same middleware, same database,
none of DRF, authentication, validation or event scheduling.
"""

from config.settings import *  # noqa: F401,F403

ROOT_URLCONF = "bench.bareapi.urls"
