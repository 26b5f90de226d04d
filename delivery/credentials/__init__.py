"""Secrets at rest: receiver URLs (one spelling each, a keyed identity, encrypted, shown redacted)
and destinations' signing secrets. Beneath the models, which read their own columns through it."""
