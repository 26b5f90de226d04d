"""`python -m bench.rate_limited`: the `rate_limited` workload run on its own (bench/workloads/rate_limited.py).

The workload's module is imported by the registry, so running it with `-m` would import it
twice; this entry point runs its `main` once.
"""

import sys

from bench.workloads.rate_limited import main

if __name__ == "__main__":
    sys.exit(main())
