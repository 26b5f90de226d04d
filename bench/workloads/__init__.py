"""The registry: every workload by the name `--only` and results.json use, in the order a full run takes them.

One module per workload in this folder (the `import` workload's is import_users.py: `import`
is Python's). Order matters twice: `endurance` sizes itself from `burst`'s results, and
`profiles` imports the first rows of the CSV `import` wrote.
"""

from __future__ import annotations

from bench.workload import Workload
from bench.workloads import (
    api,
    audiences,
    baselines,
    burst,
    ceiling,
    destinations,
    digests,
    endurance,
    failover,
    history,
    import_users,
    person_page,
    profiles,
    queued,
    rate_limited,
    receivers,
    retention,
    scale,
    timeliness,
    upcoming,
    zonerules,
)

WORKLOADS: dict[str, Workload] = {
    module.WORKLOAD.name: module.WORKLOAD
    for module in (
        ceiling,
        baselines,
        burst,
        receivers,
        destinations,
        audiences,
        digests,
        queued,
        rate_limited,
        timeliness,
        scale,
        retention,
        history,
        upcoming,
        person_page,
        zonerules,
        import_users,
        api,
        profiles,
        endurance,
        failover,
    )
}
