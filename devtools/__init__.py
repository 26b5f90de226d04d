"""What a developer's machine and the test suite use, and a deployment never does.

`make run`'s launcher (`local`), the webhook sink it sends to (`sink`), and the
database check that `make test` runs first. The product apps never import
this package (ruff's banned-api rule, `ruff.toml`); their tests may.
"""
